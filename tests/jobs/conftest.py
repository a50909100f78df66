import pytest

from apps.jobs import messaging
from portal.celery import app


@pytest.fixture
def sent(monkeypatch):
    """Messages to node agents (name, hostname, args) and cycle triggers, instead of Redis.

    Every send to an agent goes through `messaging.send_agent_task` (services and dispatcher
    alike), and a cycle trigger through the Celery app's `send_task`: faked there, each in one
    place, they reach every caller whichever module it lives in."""
    messages: list = []
    monkeypatch.setattr(
        messaging,
        "send_agent_task",
        lambda name, host, *args, **_: messages.append((name, host, args)),
    )
    monkeypatch.setattr(
        app,
        "send_task",
        lambda name, **kwargs: messages.append((name, kwargs.get("queue"), ())),
    )
    return messages
