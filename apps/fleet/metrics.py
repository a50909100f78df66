"""The fleet's Prometheus metrics, served by /metrics (settings METRICS_COLLECTORS)."""

from prometheus_client.core import GaugeMetricFamily

from apps.fleet.selectors import fleet_summary


class FleetCollector:
    """Reads fleet state at scrape time, so /metrics is always current across processes."""

    def collect(self):
        summary = fleet_summary()
        nodes = GaugeMetricFamily("portal_nodes", "GPU nodes by status.", labels=["status"])
        for status, count in summary["nodes_by_status"].items():
            nodes.add_metric([status], count)
        yield nodes
        power = GaugeMetricFamily(
            "portal_nodes_power", "GPU nodes in service by power state.", labels=["power_state"]
        )
        for state, count in summary["nodes_by_power_state"].items():
            power.add_metric([state], count)
        yield power
        gpus = GaugeMetricFamily("portal_gpus", "Physical GPUs by admin status.", labels=["status"])
        for status, count in summary["gpus_by_status"].items():
            gpus.add_metric([status], count)
        yield gpus
        health = GaugeMetricFamily(
            "portal_gpus_health", "Physical GPUs by health.", labels=["health"]
        )
        for state, count in summary["gpus_by_health"].items():
            health.add_metric([state], count)
        yield health
        by_model = GaugeMetricFamily(
            "portal_gpus_schedulable", "Schedulable GPUs per model.", labels=["model"]
        )
        for row in summary["gpu_models"]:
            by_model.add_metric([row["name"]], row["schedulable"])
        yield by_model
