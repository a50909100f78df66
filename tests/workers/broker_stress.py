"""Stress the demo's embedded broker: many producer and consumer processes on one folder.

    python -m tests.workers.broker_stress --seconds 300 --producers 8 --consumers 8
    python -m tests.workers.broker_stress --transport filesystem --seconds 60   # kombu's own

Producers publish numbered messages to several queues for the given time, re-declaring their
queues (which rewrites the exchange tables) every few hundred messages; consumers take them
with acknowledgements, reconnecting now and then, until the queues stay empty after the
producers stop. Prints one JSON line: messages sent and received, lost, duplicated, processes
that crashed (with their errors), messages left in the queue folder and files set aside as
damaged. The test suite runs it briefly (tests/workers/test_embedded_broker.py).
"""

import argparse
import json
import multiprocessing
import sys
import time
import traceback
from pathlib import Path

QUEUES = ("stress.a", "stress.b", "stress.c", "stress.d")
EXCHANGE = "stress"
REDECLARE_EVERY = 300
IDLE_POLLS_TO_STOP = 20


def _connection(transport: str, folder: Path):
    from kombu import Connection

    from workers.broker import transport_options

    options = {**transport_options(folder), "polling_interval": 0.01}
    return Connection(f"{transport}://", transport_options=options)


def _queues():
    from kombu import Exchange, Queue

    exchange = Exchange(EXCHANGE, type="direct")
    return [Queue(name, exchange, routing_key=name) for name in QUEUES]


def produce(index: int, transport: str, folder: str, seconds: float, results: str) -> None:
    sent, error = 0, None
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with _connection(transport, Path(folder)) as connection:
                producer = connection.Producer(serializer="json")
                queues = _queues()
                for _ in range(REDECLARE_EVERY):
                    queue = queues[sent % len(queues)]
                    producer.publish(
                        {"producer": index, "n": sent},
                        exchange=queue.exchange,
                        routing_key=queue.routing_key,
                        declare=[queue],
                    )
                    sent += 1
                    if time.monotonic() >= deadline:
                        break
    except Exception:  # noqa: BLE001 - reported as a crash
        error = traceback.format_exc()
    Path(results, f"producer-{index}.json").write_text(json.dumps({"sent": sent, "error": error}))
    sys.exit(1 if error else 0)


def consume(index: int, transport: str, folder: str, stop, results: str) -> None:
    received, error = [], None
    try:
        idle = 0
        while idle < IDLE_POLLS_TO_STOP:
            with _connection(transport, Path(folder)) as connection:
                before = len(received)

                def on_message(body, message):
                    received.append([body["producer"], body["n"]])
                    message.ack()

                with connection.Consumer(_queues(), callbacks=[on_message], accept=["json"]):
                    while idle < IDLE_POLLS_TO_STOP and len(received) - before < REDECLARE_EVERY:
                        try:
                            connection.drain_events(timeout=0.1)
                            idle = 0
                        except TimeoutError:
                            idle = idle + 1 if stop.is_set() else 0
    except Exception:  # noqa: BLE001 - reported as a crash
        error = traceback.format_exc()
    Path(results, f"consumer-{index}.json").write_text(
        json.dumps({"received": received, "error": error})
    )
    sys.exit(1 if error else 0)


def run(
    *, folder: Path, seconds: float, producers: int, consumers: int, transport: str = "atomicfs"
) -> dict:
    """Run the stress on `folder` (created) and say what came through."""
    import workers.broker  # noqa: F401 - registers atomicfs:// in this process and the children

    folder = Path(folder)
    results = folder / "results"
    for name in ("results", "queue", "control", "processed"):  # kombu's own makes none
        (folder / name).mkdir(parents=True, exist_ok=True)
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    started = time.monotonic()
    consumer_processes = [
        context.Process(target=consume, args=(i, transport, str(folder), stop, str(results)))
        for i in range(consumers)
    ]
    producer_processes = [
        context.Process(target=produce, args=(i, transport, str(folder), seconds, str(results)))
        for i in range(producers)
    ]
    for process in consumer_processes + producer_processes:
        process.start()
    for process in producer_processes:
        process.join()
    stop.set()
    for process in consumer_processes:
        process.join(timeout=seconds + 120)
        if process.is_alive():
            process.kill()
            process.join()
    return _summary(
        folder, results, producers, consumers, exit_codes=[
            p.exitcode for p in producer_processes + consumer_processes
        ], elapsed=time.monotonic() - started, transport=transport,
    )  # fmt: skip


def _summary(folder, results, producers, consumers, *, exit_codes, elapsed, transport) -> dict:
    sent = {}
    errors = []
    for index in range(producers):
        path = results / f"producer-{index}.json"
        report = json.loads(path.read_text()) if path.exists() else {"sent": 0, "error": "died"}
        sent[index] = report["sent"]
        if report["error"]:
            errors.append(report["error"].strip().splitlines()[-1])
    received = []
    for index in range(consumers):
        path = results / f"consumer-{index}.json"
        report = (
            json.loads(path.read_text()) if path.exists() else {"received": [], "error": "died"}
        )
        received += [tuple(item) for item in report["received"]]
        if report["error"]:
            errors.append(report["error"].strip().splitlines()[-1])
    expected = {(p, n) for p, count in sent.items() for n in range(count)}
    unique = set(received)
    queue_folder = folder / "queue"
    return {
        "transport": transport,
        "producers": producers,
        "consumers": consumers,
        "seconds": round(elapsed, 1),
        "sent": len(expected),
        "received": len(received),
        "lost": len(expected - unique),
        "duplicated": len(received) - len(unique),
        "unexpected": len(unique - expected),
        "crashed": sum(1 for code in exit_codes if code != 0),
        "errors": sorted(set(errors)),
        "left_in_queue": len(list(queue_folder.glob("*.msg"))) if queue_folder.exists() else 0,
        "damaged": len(list((folder / "damaged").glob("*"))),
        "messages_per_second": round(len(received) / elapsed, 1) if elapsed else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", default="atomicfs", choices=["atomicfs", "filesystem"])
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--consumers", type=int, default=8)
    parser.add_argument("--folder", default="var/broker-stress")
    args = parser.parse_args()
    folder = Path(args.folder)
    if folder.exists():
        import shutil

        shutil.rmtree(folder)
    summary = run(
        folder=folder,
        seconds=args.seconds,
        producers=args.producers,
        consumers=args.consumers,
        transport=args.transport,
    )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
