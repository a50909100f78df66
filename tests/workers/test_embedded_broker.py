"""The demo's embedded broker (workers.broker, `atomicfs://`): whole messages only, each taken
once, under many producer and consumer processes at once."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kombu import Connection

from tests.workers import broker_stress
from workers.broker import is_embedded, transport_options

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_defaults_to_the_atomic_transport():
    """Without Redis the portal's broker is atomicfs:// under var/broker."""
    code = (
        "import os, django; os.environ['DJANGO_SETTINGS_MODULE'] = 'portal.settings';"
        " django.setup(); from django.conf import settings;"
        " print(settings.CELERY_BROKER_URL,"
        " settings.CELERY_BROKER_TRANSPORT_OPTIONS['control_folder'])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={"DJANGO_DEBUG": "1", "PATH": os.environ["PATH"]},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.split() == ["atomicfs://", str(ROOT / "var" / "broker" / "control")]
    assert is_embedded("atomicfs://") and not is_embedded("redis://127.0.0.1:6379/0")


def test_an_unreadable_message_is_set_aside_and_the_next_one_delivered(tmp_path, caplog):
    """A message file that is empty (how kombu's own transport's race looked to a consumer)
    no longer stops the consumer: it goes to damaged/ and the queue goes on."""
    with Connection("atomicfs://", transport_options=transport_options(tmp_path)) as connection:
        queue = connection.SimpleQueue("demo")
        (tmp_path / "queue" / "00000000000000000001_x.demo.msg").write_bytes(b"")
        queue.put({"n": 1})
        message = queue.get(timeout=5)
        assert message.payload == {"n": 1}
        message.ack()
        assert queue.qsize() == 0
        queue.close()
    assert [p.name for p in (tmp_path / "damaged").iterdir()] == ["00000000000000000001_x.demo.msg"]
    assert "unreadable message" in caplog.text


def test_no_partial_file_is_ever_visible_as_a_message(tmp_path):
    """Messages are written under a hidden name and renamed: the queue folder never holds a
    `.msg` file that is not a whole message."""
    with Connection("atomicfs://", transport_options=transport_options(tmp_path)) as connection:
        queue = connection.SimpleQueue("demo")
        for n in range(20):
            queue.put({"n": n, "pad": "x" * 10_000})
        files = sorted((tmp_path / "queue").iterdir())
        assert len(files) == 20 and all(f.name.endswith(".demo.msg") for f in files)
        assert all(json.loads(f.read_bytes())["properties"] for f in files)
        assert [queue.get(timeout=5).payload["n"] for _ in range(20)] == list(range(20))
        queue.close()


@pytest.mark.slow
def test_many_producers_and_consumers_lose_and_duplicate_nothing(tmp_path):
    """Separate processes publishing and consuming at once, re-declaring their queues as
    they go (`python -m tests.workers.broker_stress` runs the same for minutes)."""
    summary = broker_stress.run(folder=tmp_path, seconds=15, producers=4, consumers=4)
    assert summary["crashed"] == 0, summary["errors"]
    assert summary["sent"] > 0
    assert summary["received"] == summary["sent"]
    assert summary["lost"] == summary["duplicated"] == summary["unexpected"] == 0
    assert summary["left_in_queue"] == summary["damaged"] == 0
