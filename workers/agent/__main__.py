"""Start the node agent: `python -m workers.agent --backend real|simulated [--hostname H]`."""

import argparse
import os
import socket

from workers.agent.app import BACKENDS, create_app, node_queue


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
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    app = create_app(hostname=args.hostname, backend=args.backend)
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
