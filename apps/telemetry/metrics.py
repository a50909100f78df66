"""Telemetry ingest's Prometheus metrics, served by /metrics (settings METRICS_COLLECTORS)."""

from django.db.models import Sum
from prometheus_client.core import CounterMetricFamily

from apps.telemetry.models import IngestBatch, TelemetryCounter


class TelemetryCollector:
    """Ingest counters kept in the database, so every web process reports the same totals."""

    def collect(self):
        stored = CounterMetricFamily(
            "portal_telemetry_samples_stored", "GPU samples stored by ingest."
        )
        rejected = CounterMetricFamily(
            "portal_telemetry_samples_rejected",
            "GPU samples rejected by ingest.",
            labels=["reason"],
        )
        duplicate = CounterMetricFamily(
            "portal_telemetry_batches_duplicate", "Telemetry batches delivered again and skipped."
        )
        dead_letters = CounterMetricFamily(
            "portal_telemetry_dead_letters",
            "Telemetry messages that could not be stored, parked for admins (admin site).",
            labels=["reason"],
        )
        live = IngestBatch.objects.aggregate(n=Sum("stored"))["n"] or 0
        totals = {"samples_stored_archived": 0, "batches_duplicate": 0}
        for name, reason, value in TelemetryCounter.objects.values_list("name", "reason", "value"):
            if name == "samples_rejected":
                rejected.add_metric([reason], value)
            elif name == "dead_letters":
                dead_letters.add_metric([reason], value)
            elif name in totals:
                totals[name] += value
        stored.add_metric([], live + totals["samples_stored_archived"])
        duplicate.add_metric([], totals["batches_duplicate"])
        yield from (stored, rejected, duplicate, dead_letters)
