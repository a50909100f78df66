"""The advice on the hand-made scenario of conftest.py, with the answers worked out by hand."""

from datetime import timedelta
from decimal import Decimal

import pytest

from apps.efficiency.advice import Filters, right_sizing, totals
from apps.efficiency.selectors import window_bounds
from tests.factories import FinanceUserFactory, PlatformAdminFactory

pytestmark = pytest.mark.django_db


def _advice(viewer, **filters):
    start, end = window_bounds()
    return right_sizing(user=viewer, filters=Filters(start=start, end=end, **filters))


def _by_key(items):
    return {f"{i.kind}-{i.pk}": i for i in items}


def test_each_finding_has_the_hand_computed_suggestion_and_saving(scenario, team_admin):
    items = _by_key(_advice(team_admin))
    s = scenario
    # Job A: 4 GPUs x 2 h = 8 GPU-h held; GPUs 1-3 never busy: 3 x 2 = 6 idle GPU-h, 6/8 = 75 %
    # of the GPU-time (> 30 %). Suggested ceil(4 x (1 - 0.75)) = 1 GPU; saved 6 x 2.50 = 15.00.
    a = items[f"job-{s.a.pk}"]
    assert [f.kind for f in a.findings] == ["idle_gpus"]
    assert a.findings[0].suggestion == "request 1 GPU instead of 4"
    assert a.findings[0].saving == Decimal("15.00")
    assert a.efficiency.idle_gpus == 3
    assert a.efficiency.gpu_hours == pytest.approx(8.0)
    assert a.efficiency.busy_gpu_hours == pytest.approx(2.0)
    # Activity: (90 x 120 min + 0 x 360 min) / 480 min = 22.5 % utilization (no GPM here).
    assert a.efficiency.activity_percent == pytest.approx(22.5)
    assert a.efficiency.activity_signal == "util"
    # Job B: peak 20,000 MiB of 81,559 (24.5 % <= 50 %). H100 takes MIG; 1g.10gb holds 10,240
    # MiB (too small), 2g.20gb 20,480: suggested. 1 GPU-h at 2.50 x (1 - 2/7) = 1.7857 -> 1.79.
    b = items[f"job-{s.b.pk}"]
    assert [f.kind for f in b.findings] == ["memory"]
    assert "2g.20gb" in b.findings[0].suggestion
    assert b.findings[0].saving == Decimal("1.79")
    # Booking C: released, never any work: a no-show. 2 GPUs x 1 h held = 2 GPU-h x 2.50 = 5.00.
    c = items[f"booking-{s.c.pk}"]
    assert [f.kind for f in c.findings] == ["no_show"]
    assert c.findings[0].saving == Decimal("5.00")
    # Booking F: released after 2 idle GPU-h (of 3 held) on an L40S at 1.00: 2.00; the work
    # took 3 - 2 = 1 h. Memory 30,000 of 46,068 MiB = 65 % > 50 %: no memory finding.
    f = items[f"booking-{s.f.pk}"]
    assert [x.kind for x in f.findings] == ["released_idle"]
    assert f.findings[0].saving == Decimal("2.00")
    assert "for 1.0 h" in f.findings[0].suggestion
    # Job D used both GPUs and 60,000 MiB (74 %): nothing to say. Job E is another team's.
    assert f"job-{s.d.pk}" not in items
    assert f"job-{s.e.pk}" not in items
    # Largest saving first.
    assert list(items) == [
        f"job-{s.a.pk}",
        f"booking-{s.c.pk}",
        f"booking-{s.f.pk}",
        f"job-{s.b.pk}",
    ]


def test_totals_per_team_and_user_add_up_by_hand(scenario):
    items = _advice(PlatformAdminFactory())
    # vision: 15.00 + 1.79 + 5.00 + 2.00 = 23.79; nlp: job E, 5 idle of 6 GPUs for 1 h (5/6 of
    # the GPU-time): suggested ceil(6 x 1/6) = 1 GPU, saved 5 x 2.50 = 12.50.
    teams = {row["team"]: row["saving"] for row in totals(items, by="team")}
    assert teams == {"vision": Decimal("23.79"), "nlp": Decimal("12.50")}
    users = {row["user"]: row["saving"] for row in totals(items, by="user")}
    # alice: A + B = 16.79; bob: C + F = 7.00; olga: E.
    assert users == {"alice": Decimal("16.79"), "bob": Decimal("7.00"), "olga": Decimal("12.50")}
    e = _by_key(items)[f"job-{scenario.e.pk}"]
    assert e.findings[0].suggestion == "request 1 GPU instead of 6"


def test_members_see_their_own_admins_their_teams_finance_everything(
    scenario, member, team_admin, outsider
):
    s = scenario
    assert {i.pk for i in _advice(member)} == {s.a.pk, s.b.pk}
    assert {(i.kind, i.pk) for i in _advice(s.bob)} == {("booking", s.c.pk), ("booking", s.f.pk)}
    assert len(_advice(team_admin)) == 4
    assert [i.pk for i in _advice(outsider)] == [s.e.pk]
    assert len(_advice(FinanceUserFactory())) == 5


def test_filters_narrow_the_advice(scenario, team_admin):
    s = scenario
    assert {i.pk for i in _advice(team_admin, kind="booking")} == {s.c.pk, s.f.pk}
    assert [i.pk for i in _advice(team_admin, finding="memory")] == [s.b.pk]
    assert {i.pk for i in _advice(team_admin, user="bob")} == {s.c.pk, s.f.pk}
    assert _advice(team_admin, team="nlp") == []  # not theirs: nothing, even when asked


def test_a_window_before_the_work_has_nothing(scenario, team_admin):
    end = scenario.t0 - timedelta(days=1)
    start = end - timedelta(days=7)
    assert right_sizing(user=team_admin, filters=Filters(start=start, end=end)) == []


def test_a_window_cutting_a_job_counts_only_the_hours_inside(scenario, team_admin):
    # Only the first hour of job A: 4 GPU-h held, 3 idle -> saving 3 x 2.50 = 7.50.
    filters = Filters(start=scenario.t0, end=scenario.t0 + timedelta(hours=1), kind="job")
    a = _by_key(right_sizing(user=team_admin, filters=filters))[f"job-{scenario.a.pk}"]
    assert a.efficiency.gpu_hours == pytest.approx(4.0)
    assert a.findings[0].saving == Decimal("7.50")


def test_stored_summaries_give_the_same_advice_without_the_rollups(scenario, team_admin):
    from apps.efficiency.models import AllocationSummary
    from apps.efficiency.services import allocation_summaries_update
    from apps.telemetry.models import GpuMinuteRollup

    before = {(i.kind, i.pk): [(f.kind, f.saving) for f in i.findings] for i in _advice(team_admin)}
    done = allocation_summaries_update(since=scenario.t0 - timedelta(days=1))
    # Jobs A, B, D, E and bookings C, F have ended: six summaries; a second run adds none.
    assert done == {"jobs": 4, "bookings": 2}
    allocation_summaries_update(since=scenario.t0 - timedelta(days=1))
    assert AllocationSummary.objects.count() == 6
    GpuMinuteRollup.objects.all().delete()
    after = {(i.kind, i.pk): [(f.kind, f.saving) for f in i.findings] for i in _advice(team_admin)}
    assert after == before and len(after) == 4


def test_an_allocation_cut_by_the_window_is_not_read_from_its_summary(scenario, team_admin):
    from apps.efficiency.services import allocation_summaries_update

    allocation_summaries_update(since=scenario.t0 - timedelta(days=1))
    filters = Filters(start=scenario.t0, end=scenario.t0 + timedelta(hours=1), kind="job")
    a = _by_key(right_sizing(user=team_admin, filters=filters))[f"job-{scenario.a.pk}"]
    assert a.efficiency.gpu_hours == pytest.approx(4.0)  # the first hour only, summed live


def test_memory_advice_names_a_cheaper_model_where_mig_is_not_offered(
    team, member, team_admin, fleet
):
    from apps.fleet.models import Gpu, GpuModel
    from tests.efficiency.conftest import add_minutes, make_job
    from tests.factories import GpuModelFactory, RateCardFactory

    l40s = GpuModel.objects.get(name="L40S-48GB")
    GpuModel.objects.filter(pk=l40s.pk).update(memory_mib=46068)
    RateCardFactory(gpu_model=l40s, price_per_gpu_hour=Decimal("1.00"))
    # A cheaper model with enough memory, and a cheaper one with too little.
    RateCardFactory(
        gpu_model=GpuModelFactory(name="L4-24GB", memory_mib=23034),
        price_per_gpu_hour=Decimal("0.40"),
    )
    RateCardFactory(
        gpu_model=GpuModelFactory(name="T4-16GB", memory_mib=15360),
        price_per_gpu_hour=Decimal("0.20"),
    )
    start = window_bounds()[1].replace(minute=0, second=0, microsecond=0) - timedelta(hours=5)
    gpus = list(Gpu.objects.filter(node__hostname="l40s-a").order_by("index")[:2])
    job = make_job(team, member, gpus, start, 3)
    for gpu in gpus:
        add_minutes(gpu, start, 180, util=70, mem=15000, mem_max=18000)
    (item,) = _advice(team_admin)
    # Peak 18,000 of 46,068 MiB (39 %): L40S has no MIG; L4 (23,034 MiB) holds it, T4 does
    # not. 2 GPUs x 3 h = 6 GPU-h x (1.00 - 0.40) = 3.60.
    assert item.pk == job.pk and [f.kind for f in item.findings] == ["memory"]
    assert item.findings[0].suggestion == "L4-24GB GPUs instead of L40S-48GB"
    assert item.findings[0].saving == Decimal("3.60")
