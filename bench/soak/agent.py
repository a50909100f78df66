"""The simulated node agent of `python -m workers.agent`, unchanged, except that every telemetry
batch it handed to the broker (the send returned) is written down in
$SOAK_SENT_DIR/sent-<hostname>.jsonl: node, seq and each sample's GPU and timestamp. A batch
whose send failed stays in the agent's buffer and is written down when a later send succeeds.

    python -m bench.soak.agent --backend simulated --hostname H ...
"""

import json
import os
from pathlib import Path

import workers.agent.__main__ as agent_main


def recording(create_app):
    def create(**options):
        app = create_app(**options)
        agent = app.conf.agent
        path = Path(os.environ["SOAK_SENT_DIR"]) / f"sent-{agent.hostname}.jsonl"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        send = agent.send

        def send_and_record(task_name: str, payload: dict) -> None:
            send(task_name, payload)
            if task_name == "telemetry.ingest":
                samples = [[s["uuid"], s["ts"]] for s in payload["samples"]]
                line = {"node": payload["node"], "seq": payload["seq"], "samples": samples}
                # One write per batch on an O_APPEND file: whole lines even if killed.
                os.write(fd, (json.dumps(line) + "\n").encode())

        agent.send = send_and_record
        return app

    return create


if __name__ == "__main__":
    agent_main.create_app = recording(agent_main.create_app)
    agent_main.main()
