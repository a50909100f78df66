"""A soak job: keeps its GPUs for SECONDS and writes down, every second, that it is still
running, so the soak can tell from the processes themselves whether a job ran twice or two jobs
shared a GPU. Run by a simulated node agent as the job's command:

    python bench/soak/job.py SECONDS FOLDER

It writes FOLDER/run-<job>-<attempt>-<pid>.json: job, attempt, pid, CUDA_VISIBLE_DEVICES, the
start and the last moment it was known alive (its exit, or its last heartbeat when killed)."""

import json
import os
import signal
import sys
import time

seconds, folder = float(sys.argv[1]), sys.argv[2]
record = {
    "job": os.environ["PORTAL_JOB_ID"],
    "attempt": os.environ["PORTAL_JOB_ATTEMPT"],
    "pid": os.getpid(),
    "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    "start": time.time(),
}
path = os.path.join(folder, f"run-{record['job']}-{record['attempt']}-{record['pid']}.json")


def write() -> None:
    record["last"] = time.time()
    with open(path + ".tmp", "w") as handle:
        json.dump(record, handle)
    os.replace(path + ".tmp", path)


def stop(signum, frame) -> None:
    write()
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, stop)
while time.time() - record["start"] < seconds:
    write()
    time.sleep(min(1.0, max(0.0, seconds - (time.time() - record["start"]))))
write()
