"""Delivery guarantees the telemetry and booking pipelines rely on (DESIGN rule 4)."""

from portal.celery import app


def test_tasks_are_acked_late_and_requeued_when_a_worker_dies():
    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.worker_prefetch_multiplier == 1
    assert app.conf.task_serializer == "json" and app.conf.accept_content == ["json"]


def test_beat_schedules_the_periodic_work_with_expiry():
    schedule = app.conf.beat_schedule
    assert {entry["task"] for entry in schedule.values()} >= {
        "reservations.lifecycle_tick",
        "telemetry.poll_fleet",
        "telemetry.minutely",
        "telemetry.retention",
    }
    poll = schedule["telemetry-poll-fleet"]
    assert poll["options"]["expires"] == poll["schedule"]  # a dead node never piles up polls


def test_demo_broker_keeps_every_folder_under_var(tmp_path, monkeypatch):
    """The embedded broker (demo, atomicfs://) writes queues, processed messages and exchange
    tables under one folder: nothing lands in the working directory (kombu's default ./control)
    and the portal and the agents agree on it."""
    from workers.agent.app import _transport_options

    monkeypatch.setenv("AGENT_BROKER_DIR", str(tmp_path / "broker"))
    options = _transport_options("atomicfs://")
    folders = {k: v for k, v in options.items() if k.endswith("_folder") or "folder_" in k}
    assert set(folders) == {
        "data_folder_in",
        "data_folder_out",
        "processed_folder",
        "control_folder",
    }
    assert all(v.startswith(str(tmp_path / "broker")) for v in folders.values())


def test_every_task_has_a_soft_time_limit_within_its_hard_limit():
    """Celery refuses to send a task whose soft limit (the global default where the task sets
    none) exceeds its own hard limit, so beat would log an error every time it is due."""
    app.loader.import_default_modules()
    soft_default = app.conf.task_soft_time_limit
    hard_default = app.conf.task_time_limit
    wrong = {}
    for name, task in app.tasks.items():
        if name.startswith("celery."):
            continue
        soft = task.soft_time_limit or soft_default
        hard = task.time_limit or hard_default
        if soft and hard and soft > hard:
            wrong[name] = (soft, hard)
    assert not wrong, f"soft time limit above the hard limit: {wrong}"
    assert {entry["task"] for entry in app.conf.beat_schedule.values()} <= set(app.tasks)
