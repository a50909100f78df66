"""Replay a GPU job trace through the live scheduler's code in simulated time.

    manage.py replay_trace ../shared/data/traces/alibaba_openb_pod_list_default.csv \
        --fleet 16x8:GPU --policy fairshare --out var/replay

prints the policy's metrics beside the FIFO baseline, then what each team sees (guarantee
wait, average JCT shared vs alone on its guaranteed GPUs, finish-time fairness rho), and
writes `replay.json` and a self-contained Plotly report `replay.html` (plotly.js embedded, no
CDN) into --out;
`--jobs-out FILE` writes one CSV row per job of the chosen policy. Traces: the Alibaba pod
list, any CSV with named columns (times in seconds, ISO 8601 or `YYYY-MM-DD HH:MM:SS`,
durations in seconds or `[D-]HH:MM:SS`), or `--format slurm` for `sacct --parsable2` output.
Bad rows are skipped and counted by reason with line numbers; a file that cannot be read is
one error and a non-zero exit.

`--power-save-after SECONDS` replays with power saving (`apps.fleet.power_rules`, the rule the
live policy follows): a node fully idle that long powers down unless that leaves fewer than
`--warm-gpus` idle powered-on GPUs of its model; queued work wakes powered-off nodes, which take
work `--resume-seconds` later; at most `POWER_MAX_CYCLES_PER_DAY` power-downs per node a day and
the minimum on/off times `POWER_MIN_ON_MINUTES` / `POWER_MIN_OFF_MINUTES`, as live. The policy's
results are then those with power saving, beside the same policy always on (`always-on`) and
FIFO; each result gains idle node-hours, node-hours off, energy saved (at `--idle-watts` per
idle node), power cycles and bookings started late (none: the replay has no bookings).
"""

import json
from pathlib import Path

import plotly.graph_objects as go
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from plotly.subplots import make_subplots

from apps.fleet import power_rules
from apps.jobs.scheduler import POLICIES, SPARE_ORDERS, SchedulerConfig
from apps.jobs.scheduler.replay import RUNTIME_LIMITS, format_table, simulate, write_job_rows
from apps.jobs.scheduler.replay_power import DEFAULT_IDLE_WATTS
from apps.jobs.scheduler.team_metrics import format_team_metrics, team_metrics
from apps.jobs.scheduler.trace import (
    TraceError,
    default_quotas,
    helios_quotas,
    load_alibaba_pods,
    load_fleet_csv,
    load_generic,
    load_quota_units,
    load_slurm,
    parse_fleet,
)

BASELINE = "fifo"
ALWAYS_ON = "always-on"


class Command(BaseCommand):
    help = "Replay a job trace (CSV) against a fleet under a scheduling policy, beside FIFO."

    def add_arguments(self, parser):
        parser.add_argument("trace", help="CSV of jobs")
        parser.add_argument(
            "--format",
            choices=["auto", "alibaba", "generic", "slurm"],
            default="auto",
            help="alibaba: the openb pod list as it is; generic: name the columns; slurm: "
            "sacct --parsable2 output (default: alibaba when the file has a creation_time "
            "column, slurm when its header is JobID|...)",
        )
        fleet = parser.add_mutually_exclusive_group(required=True)
        fleet.add_argument("--fleet", help='nodes x GPUs : model, e.g. "4x8:H100,2x4:L40S"')
        fleet.add_argument("--fleet-csv", help="node list CSV (Alibaba openb node list)")
        parser.add_argument("--policy", choices=sorted(POLICIES), default="fairshare")
        parser.add_argument(
            "--spare-order",
            choices=SPARE_ORDERS,
            default="share",
            help="fairshare: order of the GPUs above the guarantees (share: lowest weighted "
            "share first; las: least attained service first; tiresias: the same in queues of "
            "attained GPU-hours; slowdown: highest response ratio first)",
        )
        parser.add_argument(
            "--runtime-limits",
            choices=RUNTIME_LIMITS,
            default="classes",
            help="what the scheduler is told of a job's runtime when the trace gives no limit: "
            "classes (its duration rounded up to 1 h, 4 h, 24 h, 72 h or 7 d, as users give "
            "limits) or exact (its true duration: an oracle, for reference)",
        )
        parser.add_argument(
            "--pack-borrowed",
            action="store_true",
            help="fairshare: keep over-quota work on other nodes than guaranteed work",
        )
        parser.add_argument(
            "--quotas",
            help=(
                "CSV team,model,guaranteed,limit[,parent] (default: equal). With a parent "
                "column, a name that is some row's parent is an organisation unit: its rows cap "
                "its teams together and its idle guarantee is lent to them first (empty model: "
                "any model; a unit row with empty guaranteed and limit only places it)"
            ),
        )
        parser.add_argument("--helios-quotas", help="Helios VC quota CSV, scaled to the fleet")
        parser.add_argument("--limit", type=int, help="replay only the first N jobs")
        parser.add_argument("--out", default="var/replay", help="folder for replay.json/.html")
        parser.add_argument("--jobs-out", help="CSV file: one row per job of --policy")
        power = parser.add_argument_group("power saving")
        power.add_argument(
            "--power-save-after",
            type=float,
            metavar="SECONDS",
            help="power a node down after it was fully idle this long (default: never)",
        )
        power.add_argument(
            "--resume-seconds",
            type=float,
            default=300.0,
            help="from waking a node until it takes work (default 300)",
        )
        power.add_argument(
            "--warm-gpus",
            type=int,
            default=0,
            help="idle powered-on GPUs of each model that stay on (default 0)",
        )
        power.add_argument(
            "--idle-watts",
            type=float,
            default=DEFAULT_IDLE_WATTS,
            help=f"watts an idle node draws (default {DEFAULT_IDLE_WATTS:.0f})",
        )
        for column in ("submit", "duration", "end", "gpus", "team", "model", "user"):
            parser.add_argument(f"--{column}-column", help=f"generic traces: the {column} column")

    def handle(self, *args, **options):
        try:
            loaded = self._load_trace(options)
            gpus = (
                parse_fleet(options["fleet"])
                if options["fleet"]
                else load_fleet_csv(options["fleet_csv"])
            )
            teams = sorted({job.team for job in loaded.jobs})
            units = None
            if options["quotas"]:
                quotas, units = load_quota_units(options["quotas"])
            elif options["helios_quotas"]:
                quotas = helios_quotas(options["helios_quotas"], gpus, teams)
            else:
                quotas = default_quotas(gpus, teams)
            saving = self._power_saving(options)
        except (TraceError, OSError, ValueError) as error:
            raise CommandError(str(error)) from error
        if not loaded.jobs:
            raise CommandError("The trace has no job that asks for a GPU.")
        policies = [options["policy"]] + ([BASELINE] if options["policy"] != BASELINE else [])
        self.stdout.write(
            f"{len(loaded.jobs):,} jobs, {len(gpus):,} GPUs, teams {', '.join(teams)}; "
            f"rows adjusted or skipped: {loaded.describe()}"
        )
        config = SchedulerConfig(
            spare_order=options["spare_order"], pack_borrowed=options["pack_borrowed"]
        )
        runs = [(name, name, None) for name in policies]
        if saving is not None:
            runs.insert(1, (ALWAYS_ON, options["policy"], None))
            runs[0] = (options["policy"], options["policy"], saving)
        results = {
            name: simulate(
                loaded.jobs, gpus, quotas, policy, config,
                runtime_limits=options["runtime_limits"],
                power_saving=power, idle_watts=options["idle_watts"], units=units,
            )
            for name, policy, power in runs
        }  # fmt: skip
        self.stdout.write(format_table(results))
        if saving is not None:
            self.stdout.write(_power_summary(results[options["policy"]], results[ALWAYS_ON]))
        teams = {name: team_metrics(result, quotas, units) for name, result in results.items()}
        self.stdout.write(
            "What teams see (guarantee wait, shared vs alone, rho = JCT shared / alone):"
        )
        self.stdout.write(format_team_metrics(teams))
        out = Path(options["out"])
        out.mkdir(parents=True, exist_ok=True)
        document = {
            "trace": str(options["trace"]),
            "jobs": len(loaded.jobs),
            "gpus": len(gpus),
            "row_counts": dict(loaded.counts),
            "row_lines": loaded.lines,
            "results": {name: result.as_dict() for name, result in results.items()},
            "teams": {name: metrics.as_dict() for name, metrics in teams.items()},
        }
        (out / "replay.json").write_text(json.dumps(document, indent=2))
        _report(results).write_html(out / "replay.html", include_plotlyjs=True, full_html=True)
        if options["jobs_out"]:
            path = Path(options["jobs_out"])
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w", newline="") as handle:
                rows = write_job_rows(results[options["policy"]], handle)
            self.stdout.write(f"Wrote {rows:,} job rows to {path}")
        self.stdout.write(self.style.SUCCESS(f"Wrote {out / 'replay.json'} and replay.html"))

    def _power_saving(self, options) -> power_rules.PowerSaving | None:
        """The power-saving settings asked for (None: always on); ValueError for bad ones."""
        if options["power_save_after"] is None:
            return None
        for option in ("power_save_after", "resume_seconds", "warm_gpus", "idle_watts"):
            if options[option] < 0:
                raise ValueError(f"--{option.replace('_', '-')} must not be negative.")
        return power_rules.PowerSaving(
            idle_seconds=options["power_save_after"],
            resume_seconds=options["resume_seconds"],
            warm_gpus=options["warm_gpus"],
            **power_rules.limits_from(settings),
        )

    def _load_trace(self, options):
        fmt = options["format"]
        if fmt == "auto":
            try:
                with open(options["trace"], encoding="utf-8") as handle:
                    header = handle.readline()
            except (OSError, UnicodeDecodeError) as error:
                raise TraceError(f"Cannot read {options['trace']}: {error}") from None
            if "creation_time" in header:
                fmt = "alibaba"
            elif header.startswith("JobID|"):
                fmt = "slurm"
            else:
                fmt = "generic"
        if fmt == "alibaba":
            return load_alibaba_pods(options["trace"], limit=options["limit"])
        if fmt == "slurm":
            loaded = load_slurm(options["trace"])
            if options["limit"]:
                loaded.jobs = loaded.jobs[: options["limit"]]
            return loaded
        columns = {
            name: options[f"{name}_column"]
            for name in ("submit", "duration", "end", "gpus", "team", "model", "user")
            if options[f"{name}_column"]
        }
        loaded = load_generic(options["trace"], **columns)
        if options["limit"]:
            loaded.jobs = loaded.jobs[: options["limit"]]
        return loaded


def _power_summary(saved, always_on) -> str:
    """What power saving saved and what it cost in JCT, against the same policy always on."""
    share = saved.node_hours_off / saved.idle_node_hours if saved.idle_node_hours else 0.0
    added = saved.avg_jct - always_on.avg_jct
    ratio = added / always_on.avg_jct if always_on.avg_jct else 0.0
    return "\n".join(
        [
            "Power saving:",
            f"  fully idle node-hours {saved.idle_node_hours:,.1f} (always on: "
            f"{always_on.idle_node_hours:,.1f}); powered off {saved.node_hours_off:,.1f} "
            f"({share:.1%})",
            f"  energy saved {saved.energy_saved_kwh:,.1f} kWh "
            f"(at {saved.power_saving['idle_watts']:.0f} W per idle node)",
            f"  power cycles {saved.power_cycles:,}; most in one node-day "
            f"{saved.max_cycles_per_node_day}",
            f"  average JCT added {added / 3600:+.3f} h ({ratio:+.2%})",
            f"  bookings started late {saved.bookings_late} ({saved.bookings_late_reason})",
        ]
    )


def _report(results) -> go.Figure:
    """Wait per team, the headline metrics and the queue length over time, per policy."""
    figure = make_subplots(
        rows=2,
        cols=2,
        specs=[[{}, {}], [{"colspan": 2}, None]],
        subplot_titles=(
            "average wait per team (h)",
            "JCT and wait (h)",
            "jobs queued over time (days since the first submit)",
        ),
    )
    for name, result in results.items():
        teams = sorted(result.team_avg_wait)
        figure.add_bar(
            x=teams, y=[result.team_avg_wait[t] / 3600 for t in teams], name=name, row=1, col=1
        )
        hours = [result.avg_jct, result.p95_jct, result.avg_wait, result.p95_wait]
        figure.add_bar(
            x=["avg JCT", "p95 JCT", "avg wait", "p95 wait"],
            y=[v / 3600 for v in hours],
            name=f"{name} ",
            row=1,
            col=2,
        )
        figure.add_scatter(
            x=[t / 86400 for t, _ in result.queue_length],
            y=[n for _, n in result.queue_length],
            mode="lines",
            name=f"{name} queue",
            row=2,
            col=1,
        )
    figure.update_layout(barmode="group", title="Trace replay", template="simple_white", height=800)
    return figure
