"""Every hot path at 10,000 GPUs (1,250 nodes x 8), each beside its floor, in one run.

Each part is one of the project's benchmarks run at this scale; each builds the fleet and the
history its path reads (written directly with COPY, not through agents) in its own database,
and prints the portal's figure beside its floor (raw COPY, raw SQL, a bare view, a minimal
loop) measured in the same run, with their ratio and the target met or missed:

  ingest      one 15 s poll of the whole fleet (and three more) through telemetry_ingest
              vs a raw COPY                                   bench/telemetry.py --only a
  rollups     minute and hour rollups of an hour of raw samples vs a GROUP BY
                                                              bench/telemetry.py --only c
  retention   dropping a day of raw samples vs a raw DELETE   bench/retention.py
  metering    the hourly run on day 2 and day 28, the month's exports (FOCUS 1.3, statements
              ZIP, XLSX) vs SQL GROUP BYs                     bench/billing.py
  dashboards  30 days of utilization, idle and right-sizing advice vs raw SQL aggregates
                                                              bench/dashboards.py
  booking     availability search and the booking API vs raw SQL and a bare view
                                                              bench/reservations.py
  scheduler   one cycle with 100,000 queued jobs on 20,000 GPUs vs a naive first fit
                                                              bench/scheduler.py --skip-replay

Run: .venv/bin/python bench/scale.py [--gpus 10000] [--only ingest,rollups,...]
Takes tens of minutes and a few GB of PostgreSQL at 10,000 GPUs; --gpus 2000 for a quick look.
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parts(gpus: int) -> dict[str, list[str]]:
    return {
        "ingest": ["bench/telemetry.py", "--only", "a"],
        "rollups": ["bench/telemetry.py", "--only", "c", "--rollup-gpus", str(gpus)],
        # COPYing a whole day of 10,000 GPUs (57.6 million rows) three times would dominate the
        # run; dropping a partition costs the same whatever its size, so a tenth of the fleet
        # shows it (the raw DELETE it is compared with grows with the rows).
        "retention": ["bench/retention.py", "--gpus", str(max(8, gpus // 10))],
        "metering": ["bench/billing.py", "--gpus", str(gpus)],
        "dashboards": ["bench/dashboards.py", "--gpus", str(gpus)],
        "booking": ["bench/reservations.py", "--gpus", str(gpus)],
        "scheduler": [
            "bench/scheduler.py",
            "--skip-replay",
            "--cycle-gpus",
            str(2 * gpus),
            "--cycle-jobs",
            str(10 * gpus),
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--only", help="comma-separated parts to run (default: all)")
    args = parser.parse_args()
    chosen = parts(args.gpus)
    if args.only:
        names = args.only.split(",")
        unknown = set(names) - set(chosen)
        if unknown:
            parser.error(f"unknown parts {sorted(unknown)}; known: {', '.join(chosen)}")
        chosen = {name: chosen[name] for name in names}
    summary = []
    for name, command in chosen.items():
        print(f"\n=== {name}: {' '.join(command)}", flush=True)
        started = time.perf_counter()
        code = subprocess.call([sys.executable, *command], cwd=ROOT)
        summary.append((name, code, time.perf_counter() - started))
    print("\n=== summary (each part printed its figures, floors, ratios and targets above)")
    for name, code, seconds in summary:
        print(f"  {name:<11} {'ok' if code == 0 else f'exit {code}':<8} {seconds:8.0f} s")
    sys.exit(max((code for _, code, _ in summary), default=0))


if __name__ == "__main__":
    main()
