"""The minutely rollup recomputes only minutes whose samples or holder changed, and the rows it
leaves are exactly those of a rollup from scratch."""

from datetime import timedelta

import pytest

from apps.reservations.models import ReservationGpu
from apps.telemetry.ingest import store_samples
from apps.telemetry.models import GpuMinuteRollup
from apps.telemetry.rollups import rollup_minutes
from tests.factories import ReservationFactory
from tests.telemetry.test_rollups_idle import _rollup_rows

pytestmark = pytest.mark.django_db

STEP_S = 15


def _samples(gpu, start, seconds, *, energy_at):
    return [
        (gpu.id, start + timedelta(seconds=s), (gpu.id * 7 + s) % 101, 5, 1000 + s, 300.0, 50,
         energy_at(s))
        for s in seconds
    ]  # fmt: skip


def _from_scratch(start, end):
    """What a rollup of [start, end) over no stored minutes writes."""
    stored = _rollup_rows(GpuMinuteRollup)
    GpuMinuteRollup.objects.all().delete()
    rollup_minutes(start=start, end=end)
    fresh = _rollup_rows(GpuMinuteRollup)
    GpuMinuteRollup.objects.all().delete()
    GpuMinuteRollup.objects.bulk_create(
        GpuMinuteRollup(
            gpu_id=row[0], bucket=row[1], team_id=row[2], samples=row[3], util_avg=row[4],
            util_max=row[5], mem_used_avg_mib=row[6], mem_used_max_mib=row[7],
            power_avg_w=row[8], energy_j=row[9], busy_seconds=row[10],
        )
        for row in stored
    )  # fmt: skip
    return stored, fresh


def test_minutes_without_new_samples_are_kept_and_the_result_equals_a_full_rollup(fleet, h100, now):
    gpus = list(h100.gpus.order_by("id")[:3])
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=30)
    end = start + timedelta(minutes=6)

    def energy(s):
        return 5_000_000 + s * 300 * 1000  # 300 W

    # Minute 3 of the first GPU has a gap: its sample at 3:15 comes late.
    late = 3 * 60 + STEP_S
    early = [s for s in range(0, 5 * 60, STEP_S) if s != late]
    for gpu in gpus:
        store_samples(_samples(gpu, start, early, energy_at=energy))
    assert rollup_minutes(start=start, end=end) == 3 * 5
    first = {row[:2]: row for row in _rollup_rows(GpuMinuteRollup)}

    assert rollup_minutes(start=start, end=end) == 0  # nothing new: nothing recomputed
    assert {row[:2]: row for row in _rollup_rows(GpuMinuteRollup)} == first

    # A poll: the sixth minute gets samples of every GPU; the late sample lands in minute 3 of
    # the first GPU.
    for gpu in gpus:
        store_samples(_samples(gpu, start, range(5 * 60, 6 * 60, STEP_S), energy_at=energy))
    store_samples(_samples(gpus[0], start, [late], energy_at=energy))
    written = rollup_minutes(start=start, end=end)
    stored, fresh = _from_scratch(start, end)
    assert stored == fresh
    # the new minute of each GPU, and the first GPU's minutes from 3 on (the energy step into
    # a minute reads the sample before it)
    assert written == 3 + 2
    changed = {row[:2] for row in stored if first.get(row[:2]) != row}
    minute = timedelta(minutes=1)
    assert changed == {(g.id, start + 5 * minute) for g in gpus} | {
        (gpus[0].id, start + 3 * minute)
    }


def test_a_minute_whose_holder_changed_is_attributed_again(fleet, h100, now, team):
    gpu = h100.gpus.order_by("id").first()
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=30)
    end = start + timedelta(minutes=4)
    store_samples(
        _samples(gpu, start, range(0, 4 * 60, STEP_S), energy_at=lambda s: 1000 + s * 1000)
    )
    rollup_minutes(start=start, end=end)
    assert set(GpuMinuteRollup.objects.values_list("team_id", flat=True)) == {None}
    booking = ReservationFactory(team=team, gpu_model=h100, start=start, end=end, count=1)
    ReservationGpu.objects.create(reservation=booking, gpu=gpu, start=start, end=end)
    assert rollup_minutes(start=start, end=end) == 4
    assert set(GpuMinuteRollup.objects.values_list("team_id", flat=True)) == {team.pk}
    assert _from_scratch(start, end)[0] == _from_scratch(start, end)[1]
