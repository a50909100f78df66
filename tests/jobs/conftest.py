import pytest

from apps.jobs import services


@pytest.fixture
def sent(monkeypatch):
    """Messages to node agents (name, hostname, args) and cycle triggers, instead of Redis."""
    messages: list = []
    monkeypatch.setattr(
        services,
        "send_agent_task",
        lambda name, host, *args, **_: messages.append((name, host, args)),
    )
    monkeypatch.setattr(
        services.current_app,
        "send_task",
        lambda name, **kwargs: messages.append((name, kwargs.get("queue"), ())),
    )
    return messages
