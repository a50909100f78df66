from datetime import timedelta

import pytest
from django.utils import timezone

from apps.fleet.models import GpuModel
from apps.teams.models import Quota


@pytest.fixture
def tomorrow_9():
    now = timezone.now()
    return (now + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)


@pytest.fixture
def h100(fleet):
    return GpuModel.objects.get(name="H100-SXM-80GB")


@pytest.fixture
def quotas(team, other_team, h100):
    """vision: 4 guaranteed / 12 limit of H100; nlp: 8 / 16."""
    return [
        Quota.objects.create(team=team, gpu_model=h100, guaranteed=4, limit=12),
        Quota.objects.create(team=other_team, gpu_model=h100, guaranteed=8, limit=16),
    ]


def booking(team="vision", count=2, start=None, hours=2, **extra):
    body = {"team": team, "gpu_model": "H100-SXM-80GB", "count": count, **extra}
    if start is not None:
        body["start"] = start.isoformat()
        body.setdefault("end", (start + timedelta(hours=hours)).isoformat())
    return body
