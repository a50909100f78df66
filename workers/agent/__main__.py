"""Start the node agent: `python -m workers.agent --backend real|simulated [--hostname H]`."""

import argparse
import os
import socket

from workers.agent.app import BACKENDS, create_app
from workers.protocol import node_queue


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workers.agent", description=__doc__)
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=os.environ.get("NVML_BACKEND", "real"),
        help="real: read the GPUs through NVML; simulated: fake GPUs for demos and tests.",
    )
    parser.add_argument(
        "--hostname",
        default=os.environ.get("AGENT_HOSTNAME") or socket.gethostname(),
        help="Node name as registered in the portal (default: this machine's hostname).",
    )
    parser.add_argument("--loglevel", default=os.environ.get("LOG_LEVEL", "INFO"))
    simulated = parser.add_argument_group("simulated backend")
    simulated.add_argument("--gpus", type=int, default=8, help="number of fake GPUs")
    simulated.add_argument("--model", default="H100-SXM-80GB", help="GPU model name")
    simulated.add_argument("--memory-mib", type=int, default=81559, help="memory per GPU")
    simulated.add_argument(
        "--profile",
        default="random",
        choices=("idle", "busy", "random", "diurnal"),
        help="load when nothing is placed on a GPU",
    )
    simulated.add_argument("--no-nvlink", action="store_true", help="PCIe-only GPUs")
    simulated.add_argument("--mig-gpus", type=int, default=0, help="GPUs in MIG mode")
    simulated.add_argument("--seed", type=int, default=0)
    simulated.add_argument(
        "--run-commands",
        action="store_true",
        help="run jobs' real commands (default: a timed sleep of SIMULATED_DURATION seconds)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    options = (
        {
            "gpu_count": args.gpus,
            "model": args.model,
            "memory_mib": args.memory_mib,
            "profile": args.profile,
            "nvlink": not args.no_nvlink,
            "mig_gpus": args.mig_gpus,
            "seed": args.seed,
        }
        if args.backend == "simulated"
        else {}
    )
    app = create_app(
        hostname=args.hostname, backend=args.backend, run_commands=args.run_commands, **options
    )
    app.worker_main(
        [
            "worker",
            "--queues",
            node_queue(args.hostname),
            "--hostname",
            f"agent@{args.hostname}",
            "--concurrency",
            "1",
            "--pool",
            "solo",
            "--loglevel",
            args.loglevel,
            "--without-gossip",
            "--without-mingle",
        ]
    )


if __name__ == "__main__":
    main()
