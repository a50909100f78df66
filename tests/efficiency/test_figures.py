"""Efficiency and cost on the job and booking APIs and pages, and per member on the team page:
figures of the hand-made scenario (conftest.py), the ledger's real charges, and the estimated
cost of a waiting job; a page of rows costs the same queries as one row."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.billing.metering import meter_interval
from apps.jobs.choices import JobStatus
from tests.conftest import client_for
from tests.efficiency.conftest import make_job
from tests.factories import JobFactory, RateCardFactory

pytestmark = pytest.mark.django_db


def test_job_api_has_efficiency_and_the_ledger_cost(scenario, member):
    meter_interval(start=scenario.t0, end=scenario.t0 + timedelta(hours=6))
    body = client_for(member).get(f"/api/v1/jobs/{scenario.a.pk}/").json()
    eff = body["efficiency"]
    # 4 GPUs x 2 h; GPU 0 busy all along: 2 busy GPU-h; 3 GPUs idle.
    assert eff["gpu_hours"] == 8.0 and eff["busy_gpu_hours"] == 2.0
    assert eff["idle_gpus"] == 3 and eff["gpus"] == 4
    assert eff["activity_percent"] == 22.5 and eff["activity_signal"] == "util"
    assert eff["memory_peak_mib"] == 70000 and eff["memory_total_mib"] == 81559
    # Metered: 8 GPU-h x 2.50 = 20.00 (a job outside a booking pays its own GPUs).
    assert body["cost"] == "20.00" and body["currency"] == "USD"
    assert body["estimated_cost"] is None


def test_booking_api_has_efficiency_and_cost(scenario, team_admin):
    meter_interval(start=scenario.t0, end=scenario.t0 + timedelta(hours=6))
    rows = client_for(team_admin).get("/api/v1/reservations/").json()["results"]
    c = next(r for r in rows if r["id"] == scenario.c.pk)
    # Held 2 GPUs for the hour before its release: 2 GPU-h x 2.50.
    assert c["cost"] == "5.00"
    assert c["efficiency"]["gpu_hours"] == 2.0 and c["efficiency"]["busy_gpu_hours"] == 0.0
    assert c["efficiency"]["idle_gpus"] == 2
    detail = client_for(team_admin).get(f"/api/v1/reservations/{scenario.f.pk}/").json()
    # 3 h on one L40S, the first busy: 1 of 3 GPU-h busy; (70 x 60 + 0 x 120) / 180 = 23.3 %.
    assert detail["efficiency"]["busy_gpu_hours"] == 1.0
    assert detail["efficiency"]["activity_percent"] == 23.3


def test_other_teams_jobs_and_bookings_stay_404(scenario, member):
    client = client_for(member)
    assert client.get(f"/api/v1/jobs/{scenario.e.pk}/").status_code == 404
    assert scenario.e.pk not in {j["id"] for j in client.get("/api/v1/jobs/").json()["results"]}


def test_job_pages_show_efficiency_and_cost(scenario, member, client):
    meter_interval(start=scenario.t0, end=scenario.t0 + timedelta(hours=6))
    client.force_login(member)
    page = client.get(f"/jobs/{scenario.a.pk}/").content.decode()
    assert 'data-testid="job-efficiency"' in page
    assert "20.00 USD" in page and "3 of 4" in page and "utilization" in page
    listing = client.get("/jobs/").content.decode()
    assert "3 of 4 GPUs idle" in listing and "20.00 USD" in listing


def test_booking_list_shows_efficiency_and_cost(scenario, team_admin, client):
    meter_interval(start=scenario.t0, end=scenario.t0 + timedelta(hours=6))
    client.force_login(team_admin)
    page = client.get("/reservations/?when=past").content.decode()
    assert "5.00 USD" in page and "2 of 2 GPUs idle" in page


def _queued(team, user, h100, n):
    return [JobFactory(team=team, submitted_by=user, gpu_model=h100, gpu_count=2) for _ in range(n)]


def test_waiting_job_estimate_prices_gpus_over_the_guarantee_at_the_over_quota_rate(
    team, member, h100, quotas, client
):
    RateCardFactory(
        gpu_model=h100, price_per_gpu_hour=Decimal("2.50"), over_quota_multiplier=Decimal("1.5")
    )
    # vision holds 3 H100 now (a running job) of a guarantee of 4.
    from apps.fleet.models import Gpu

    running = make_job(team, member, list(Gpu.objects.filter(model=h100)[:3]), timezone.now(), 1)
    running.allocations.update(end=None)
    running.status = JobStatus.RUNNING
    running.save()
    job = JobFactory(
        team=team, submitted_by=member, gpu_model=h100, gpu_count=6, max_runtime_seconds=7200
    )
    body = client_for(member).get(f"/api/v1/jobs/{job.pk}/").json()
    # 6 GPUs x 2 h = 12 GPU-h x 2.50 = 30.00; 3 + 6 > 4: the job runs as borrowed work as a
    # whole (the scheduler marks all its GPUs over quota, and metering charges them so):
    # 12 GPU-h x 2.50 x (1.5 - 1) = 15.00 more. Total 45.00.
    assert body["estimated_cost"] == "45.00"
    assert body["estimated_over_quota_gpus"] == 6
    client.force_login(member)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-testid="estimated-cost"' in page and "45.00 USD" in page
    assert "runs as over-quota work, all at the over-quota price" in page


def test_job_inside_a_booking_has_no_cost_of_its_own(scenario, member):
    scenario.a.reservation = scenario.c
    scenario.a.save()
    body = client_for(member).get(f"/api/v1/jobs/{scenario.a.pk}/").json()
    assert body["cost"] is None and body["efficiency"]["gpus"] == 4


def _count(client, url) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    return len(queries)


@pytest.mark.parametrize("url", ["/api/v1/jobs/", "/jobs/"])
def test_a_page_of_jobs_costs_the_same_queries_as_one(
    scenario, team, member, h100, quotas, client, url, django_assert_max_num_queries
):
    client.force_login(member)
    _queued(team, member, h100, 1)
    few = _count(client, url)
    _queued(team, member, h100, 20)
    for _ in range(10):
        make_job(team, member, [scenario.a.allocations.first().gpu], scenario.t0, 1)
    assert _count(client, url) == few
    with django_assert_max_num_queries(25):
        client.get(url)


@pytest.mark.parametrize("url", ["/api/v1/reservations/", "/reservations/?when=past"])
def test_a_page_of_bookings_costs_the_same_queries_as_one(
    scenario, team, team_admin, client, url, django_assert_max_num_queries
):
    from tests.factories import make_booking

    client.force_login(team_admin)
    gpu = scenario.c.holdings.first().gpu

    def past_bookings(days):
        for day in days:
            start = scenario.t0 - timedelta(days=day + 1)
            make_booking(
                team, team_admin, [gpu], start, start + timedelta(hours=1), status="completed"
            )

    past_bookings(range(1))  # one without minute telemetry: hour rollups are read too
    few = _count(client, url)
    past_bookings(range(1, 11))
    assert _count(client, url) == few
    with django_assert_max_num_queries(25):
        client.get(url)


def test_team_page_shows_each_members_efficiency_to_admins_and_own_to_members(
    scenario, team, team_admin, member, client
):
    client.force_login(team_admin)
    page = client.get(f"/teams/{team.slug}/").content.decode()
    assert 'data-member-efficiency="alice"' in page and 'data-member-efficiency="bob"' in page
    client.force_login(member)
    page = client.get(f"/teams/{team.slug}/").content.decode()
    assert 'data-member-efficiency="alice"' in page
    assert 'data-member-efficiency="bob"' not in page


def test_member_figures_add_up_jobs_and_bookings(scenario, team):
    from apps.efficiency.selectors import member_figures

    figures = member_figures(team=team)
    alice, bob = figures[scenario.a.submitted_by_id], figures[scenario.bob.pk]
    # alice: A 8 + B 1 + D 2 = 11 GPU-h held; busy 2 + 1 + 2 = 5.
    assert alice["gpu_hours"] == 11.0 and alice["busy_gpu_hours"] == 5.0
    assert alice["allocations"] == 3 and alice["idle_gpu_hours"] == 6.0
    # bob: C 2 + F 3 = 5 held, 1 busy; idle GPUs: C's two (2 GPU-h); F's GPU was busy 1/3.
    assert bob["gpu_hours"] == 5.0 and bob["busy_gpu_hours"] == 1.0
    assert bob["idle_gpu_hours"] == 2.0


def test_sm_activity_is_the_signal_where_any_minute_has_it(team, member, fleet, h100):
    from apps.efficiency.selectors import jobs_efficiency
    from apps.fleet.models import Gpu
    from tests.efficiency.conftest import add_minutes

    start = timezone.now().replace(second=0, microsecond=0) - timedelta(hours=3)
    gpus = list(Gpu.objects.filter(node__hostname="h100-a").order_by("index")[:2])
    # A tiny kernel reads as 100 % utilization while the SMs are 10 % active.
    job = make_job(team, member, gpus, start, 1)
    for gpu in gpus:
        add_minutes(gpu, start, 60, util=100, sm=10.0, busy=0)
    mixed = make_job(team, member, gpus, start + timedelta(hours=1), 1)
    add_minutes(gpus[0], start + timedelta(hours=1), 60, util=70, sm=40.0)
    add_minutes(gpus[1], start + timedelta(hours=1), 60, util=30)  # no GPM on this one
    figures = jobs_efficiency([job, mixed], end=timezone.now())
    assert figures[job.pk].activity_signal == "sm_active"
    assert figures[job.pk].activity_percent == pytest.approx(10.0)
    assert figures[job.pk].idle_gpus == 2  # busy seconds follow SM activity: none
    # Half the minutes lack SM activity: the minutes that have it still decide, as they do for
    # busy time, the idle page and idle reclaim (apps.telemetry.activity): SM activity 40 %
    # over gpus[0]'s minutes, not utilization (70 + 30) / 2 = 50 %.
    assert figures[mixed.pk].activity_signal == "sm_active"
    assert figures[mixed.pk].activity_percent == pytest.approx(40.0)


def test_hour_rollups_stand_in_where_minute_rollups_are_gone(team, member, fleet, h100):
    from apps.efficiency.selectors import jobs_efficiency
    from apps.fleet.models import Gpu
    from apps.telemetry.models import GpuHourRollup

    start = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(days=60)
    gpus = list(Gpu.objects.filter(node__hostname="h100-a").order_by("index")[:2])
    job = make_job(team, member, gpus, start, 2)
    unknown = make_job(team, member, gpus, start + timedelta(hours=5), 1)
    for hour in range(2):
        for gpu, busy in ((gpus[0], 3600.0), (gpus[1], 0.0)):
            GpuHourRollup.objects.create(
                gpu=gpu,
                bucket=start + timedelta(hours=hour),
                samples=240,
                util_avg=busy / 36,
                mem_used_avg_mib=1000,
                mem_used_max_mib=2000,
                busy_seconds=busy,
            )
    figures = jobs_efficiency([job, unknown], end=timezone.now())
    # 2 GPUs x 2 h from hour rollups: GPU 0 busy all along, GPU 1 never.
    assert figures[job.pk].busy_gpu_hours == pytest.approx(2.0)
    assert figures[job.pk].idle_gpus == 1 and figures[job.pk].covered
    assert figures[job.pk].activity_percent == pytest.approx(50.0)
    # No telemetry at all: nothing is called idle.
    assert figures[unknown.pk].idle_gpus == 0 and not figures[unknown.pk].covered


def test_member_figures_read_stored_summaries_of_ended_work(scenario, team):
    from apps.efficiency.selectors import member_figures
    from apps.efficiency.services import allocation_summaries_update
    from apps.telemetry.models import GpuMinuteRollup

    live = member_figures(team=team)
    allocation_summaries_update(since=scenario.t0 - timedelta(days=1))
    GpuMinuteRollup.objects.all().delete()
    assert member_figures(team=team) == live


def test_estimate_under_a_quota_for_all_models_and_for_any_model(team, member, fleet, h100):
    from apps.efficiency.selectors import estimated_costs
    from apps.fleet.models import Gpu, GpuModel
    from apps.teams.models import Quota

    l40s = GpuModel.objects.get(name="L40S-48GB")
    RateCardFactory(gpu_model=h100, price_per_gpu_hour=Decimal("2.50"))
    RateCardFactory(
        gpu_model=l40s, price_per_gpu_hour=Decimal("1.00"), over_quota_multiplier=Decimal("2")
    )
    Quota.objects.create(team=team, gpu_model=None, guaranteed=2, limit=8)
    running = make_job(team, member, [Gpu.objects.filter(model=h100).first()], timezone.now(), 1)
    running.allocations.update(end=None)
    on_l40s = JobFactory(team=team, submitted_by=member, gpu_model=l40s, gpu_count=2)
    anywhere = JobFactory(team=team, submitted_by=member, gpu_model=None, gpu_count=1)
    figures = estimated_costs([on_l40s, anywhere], now=timezone.now())
    # The team holds 1 H100; the all-models guarantee is 2: 2 more GPUs do not fit in it, so
    # the whole job is borrowed work: 2 GPU-h x 1.00 x 2 (multiplier) = 4.00.
    assert figures[on_l40s.pk]["estimated_cost"] == "4.00"
    assert figures[on_l40s.pk]["estimated_over_quota_gpus"] == 2
    # Any model: priced at the dearest it could land on, H100 at 2.50 (within the guarantee).
    assert figures[anywhere.pk]["estimated_cost"] == "2.50"
    assert figures[anywhere.pk]["estimated_cost_is_upper_bound"] is True


def test_estimate_counts_over_quota_gpus_by_the_quota_rule_model_and_any_model_rows(
    team, member, fleet, h100
):
    from apps.efficiency.selectors import estimated_costs
    from apps.teams.models import Quota

    RateCardFactory(gpu_model=h100, price_per_gpu_hour=Decimal("2.50"))
    # The model row guarantees 4, but the any-model row only 2: both apply, so 4 GPUs do not
    # fit and the whole job runs (and is priced) over quota.
    Quota.objects.create(team=team, gpu_model=h100, guaranteed=4, limit=8)
    Quota.objects.create(team=team, gpu_model=None, guaranteed=2, limit=8)
    waiting = JobFactory(team=team, submitted_by=member, gpu_model=h100, gpu_count=4)
    figures = estimated_costs([waiting], now=timezone.now())
    assert figures[waiting.pk]["estimated_over_quota_gpus"] == 4


def test_booking_page_shows_its_efficiency_and_cost_to_its_team_only(
    scenario, team_admin, outsider, client
):
    meter_interval(start=scenario.t0, end=scenario.t0 + timedelta(hours=6))
    client.force_login(team_admin)
    page = client.get(f"/reservations/{scenario.c.pk}/").content.decode()
    assert 'data-testid="reservation-efficiency"' in page
    assert "5.00 USD" in page and "2 of 2" in page and "h100-b" in page
    client.force_login(outsider)
    assert client.get(f"/reservations/{scenario.c.pk}/").status_code == 404
