from datetime import timedelta

import pytest
from django.utils import timezone

from apps.fleet.models import Gpu, Node
from apps.telemetry.models import GpuMinuteRollup


@pytest.fixture
def power_saving(settings, tmp_path):
    """Power saving on, 30 idle minutes, no warm reserve, the simulated driver's switches in a
    folder of the test's own."""
    settings.POWER_SAVE_ENABLED = True
    settings.POWER_SAVE_IDLE_MINUTES = 30
    settings.POWER_SAVE_WARM_GPUS = "0"
    settings.POWER_SIMULATED_DIR = str(tmp_path / "power")
    return settings


def idle_telemetry(gpus, *, minutes: int = 30, busy_at: set[int] | None = None, now=None):
    """Minute rollups for `gpus` over the last `minutes`; minutes ago in `busy_at` are busy."""
    now = (now or timezone.now()).replace(second=0, microsecond=0)
    busy_at = busy_at or set()
    GpuMinuteRollup.objects.bulk_create(
        GpuMinuteRollup(
            gpu=gpu,
            bucket=now - timedelta(minutes=ago),
            samples=4,
            busy_seconds=30 if ago in busy_at else 0,
        )
        for gpu in gpus
        for ago in range(1, minutes + 1)
    )


@pytest.fixture
def idle_fleet(fleet, power_saving):
    """The test fleet, on for hours, every GPU idle for the last half hour."""
    long_ago = timezone.now() - timedelta(hours=3)
    Node.objects.update(power_state_since=long_ago, created_at=long_ago)
    idle_telemetry(Gpu.objects.filter(mig_parent__isnull=True))
    return list(Node.objects.order_by("hostname"))
