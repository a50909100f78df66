"""Samples that arrive after the minutely rollup passed their minute (an agent flushing its
buffer after a broker outage) still reach the minute and hour rollups."""

from datetime import timedelta

import pytest

from apps.telemetry.ingest import telemetry_ingest_many
from apps.telemetry.models import GpuHourRollup, GpuMinuteRollup, LateSampleRange
from apps.telemetry.rollups import ROLLUP_WINDOW, rollup_late, rollup_minutes
from tests.telemetry.conftest import batch, sample


@pytest.mark.django_db
def test_late_samples_are_rolled_up_on_the_next_run(node_gpus, now):
    uuid, gpu = next(iter(node_gpus.items()))
    late = (now - timedelta(minutes=40)).replace(second=0)
    # The regular run already covered that minute, before the samples existed.
    rollup_minutes(start=now - ROLLUP_WINDOW, end=now)
    telemetry_ingest_many(
        batches=[batch(1, [sample(uuid, late.timestamp() + s, util=90) for s in (0, 15, 30, 45)])]
    )
    assert LateSampleRange.objects.count() == 1
    assert not GpuMinuteRollup.objects.filter(gpu=gpu, bucket=late).exists()

    done = rollup_late()

    assert done["ranges"] == 1 and done["minutes"] >= 1
    minute = GpuMinuteRollup.objects.get(gpu=gpu, bucket=late)
    assert minute.samples == 4 and minute.util_avg == 90
    hour = GpuHourRollup.objects.get(gpu=gpu, bucket=late.replace(minute=0))
    assert hour.samples == 4
    assert not LateSampleRange.objects.exists()  # done once
    assert rollup_late()["ranges"] == 0


@pytest.mark.django_db
def test_timely_samples_are_not_noted_as_late(node_gpus, now):
    uuid = next(iter(node_gpus))
    telemetry_ingest_many(batches=[batch(1, [sample(uuid, now.timestamp() - 20)])])
    assert not LateSampleRange.objects.exists()
