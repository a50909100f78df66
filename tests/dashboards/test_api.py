import pytest

from apps.telemetry.models import GpuMinuteRollup
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

ENDPOINTS = ["utilization", "idle", "occupancy", "quota-pressure"]


def trace_names(figure) -> list[str]:
    return [t.get("name") for t in figure["data"]]


@pytest.mark.parametrize("endpoint", ENDPOINTS + ["fleet-health"])
def test_anonymous_is_refused(api_client, endpoint):
    assert api_client.get(f"/api/v1/dashboards/{endpoint}/").status_code == 401


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ("range=week", "range must be one of"),
        ("range=custom", "needs a start"),
        ("range=custom&start=yesterday", "not a date"),
        ("range=custom&start=2026-01-01T00:00", "time zone"),
        ("range=custom&start=2026-01-02T00:00Z&end=2026-01-01T00:00Z", "after the start"),
        ("range=custom&start=2020-01-01T00:00Z&end=2026-01-01T00:00Z", "400 days"),
        ("gpu_model=Z9000", "no GPU model"),
    ],
)
def test_bad_filters_are_400_with_reason(member, endpoint, params, reason):
    response = client_for(member).get(f"/api/v1/dashboards/{endpoint}/?{params}")
    assert response.status_code == 400
    assert response.json()["code"] == "bad_filter"
    assert reason in response.json()["message"]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_team_outside_members_teams_is_404(member, other_team, endpoint):
    response = client_for(member).get(f"/api/v1/dashboards/{endpoint}/?team={other_team.slug}")
    assert response.status_code == 404


def test_utilization_member_sees_only_own_team(member, history):
    body = client_for(member).get("/api/v1/dashboards/utilization/?range=7d").json()
    names = trace_names(body["figures"]["allocated-busy"])
    assert "vision allocated" in names and "vision busy" in names
    assert not any(n.startswith("nlp") or n == "unallocated" for n in names)
    heat = body["figures"]["util-team-model"]["data"][0]
    assert heat["y"] == ["vision"]
    assert body["has_data"] is True
    assert body["filters"]["range"] == "7d"


def test_utilization_admin_and_finance_see_all_and_unallocated(
    platform_admin, finance_user, history
):
    for user in (platform_admin, finance_user):
        body = client_for(user).get("/api/v1/dashboards/utilization/?range=7d").json()
        names = trace_names(body["figures"]["allocated-busy"])
        assert {"vision allocated", "nlp allocated", "unallocated"} <= set(names)


def test_utilization_values_are_gpu_counts(platform_admin, history):
    body = client_for(platform_admin).get("/api/v1/dashboards/utilization/?range=7d").json()
    traces = {t["name"]: t for t in body["figures"]["allocated-busy"]["data"]}
    # Hour rollups over 7 days: 168 buckets fit in 500 points, so one point per hour.
    assert body["step_seconds"] == 3600
    assert max(traces["vision allocated"]["y"]) == pytest.approx(2)
    assert max(traces["vision busy"]["y"]) == pytest.approx(2)
    assert max(traces["nlp busy"]["y"]) == 0
    # Allocation comes from the bookings (vision 2 GPUs, nlp 1, for the last 2 hours); the
    # rest of the 20-GPU fleet is unallocated, as the chargeback counts it.
    assert max(traces["nlp allocated"]["y"]) == pytest.approx(1)
    assert max(traces["unallocated"]["y"]) == pytest.approx(20)
    assert min(traces["unallocated"]["y"]) == pytest.approx(20 - 3)
    for i in range(len(traces["unallocated"]["y"])):
        held = sum(t["y"][i] for name, t in traces.items() if name.endswith("allocated"))
        assert held == pytest.approx(20)


def test_utilization_is_downsampled_to_at_most_500_points(platform_admin, history):
    body = client_for(platform_admin).get("/api/v1/dashboards/utilization/?range=30d").json()
    for trace in body["figures"]["allocated-busy"]["data"]:
        assert len(trace["x"]) <= 500
    # 720 hours -> 2-hour steps; averaging keeps the level at 2 GPUs, not the sum 4.
    assert body["step_seconds"] == 7200
    traces = {t["name"]: t for t in body["figures"]["allocated-busy"]["data"]}
    assert max(traces["vision allocated"]["y"]) == pytest.approx(2)


def test_utilization_24h_reads_minute_rollups_for_busy_and_bookings_for_allocated(
    platform_admin, history
):
    GpuMinuteRollup.objects.all().delete()
    body = client_for(platform_admin).get("/api/v1/dashboards/utilization/?range=24h").json()
    assert body["step_seconds"] == 180  # 1440 minutes / 500 points, rounded up to minutes
    traces = {t["name"]: t for t in body["figures"]["allocated-busy"]["data"]}
    assert max(traces["vision busy"]["y"]) == 0  # no minute telemetry: nothing seen busy
    assert max(traces["vision allocated"]["y"]) == pytest.approx(2)  # but the booking holds 2
    assert body["has_data"] is True


def test_utilization_filters_by_team_and_model(platform_admin, history):
    client = client_for(platform_admin)
    body = client.get("/api/v1/dashboards/utilization/?range=7d&team=nlp").json()
    assert {n.split()[0] for n in trace_names(body["figures"]["allocated-busy"])} == {"nlp"}
    body = client.get("/api/v1/dashboards/utilization/?range=7d&gpu_model=L40S-48GB").json()
    assert trace_names(body["figures"]["allocated-busy"]) == ["unallocated"]


def test_idle_states_and_hours(platform_admin, history):
    body = client_for(platform_admin).get("/api/v1/dashboards/idle/?range=24h").json()
    counts = body["state_counts"]
    assert counts["busy"] == 1  # h100-a gpu0 reported busy minutes; gpu1 has no minute data
    assert counts["held_idle"] == 2  # gpu1 (vision) and gpu2 (nlp)
    assert counts["unallocated"] == 20 - 3
    kinds = {(r["kind"], r["model_name"]): r for r in body["by_kind"]}
    assert kinds[("held_idle", "H100-SXM-80GB")]["gpu_hours"] == pytest.approx(2)
    assert kinds[("unallocated", "L40S-48GB")]["gpu_hours"] == pytest.approx(5)
    assert kinds[("held_idle", "H100-SXM-80GB")]["cost"] is None  # no rate card: unpriced
    names = trace_names(body["figures"]["idle-hours"])
    assert "nlp (held, idle)" in names and "unallocated" in names


def test_idle_member_sees_other_teams_gpus_as_held_by_another_team(member, history):
    body = client_for(member).get("/api/v1/dashboards/idle/").json()
    assert body["state_counts"]["held_other"] == 1
    assert body["by_kind"] == []  # nlp's idle time and the unallocated pool are not theirs


def test_idle_lists_released_bookings(platform_admin, member, team, history):
    from datetime import timedelta

    from apps.reservations.choices import ReservationStatus
    from tests.dashboards.conftest import book

    now = history["now"]
    released = book(
        team,
        member,
        history["gpus"][3:4],
        now - timedelta(hours=5),
        now + timedelta(hours=5),
        status=ReservationStatus.RELEASED,
    )
    released.ended_at = now - timedelta(hours=1)
    released.released_gpu_hours = 6
    released.save()
    body = client_for(platform_admin).get("/api/v1/dashboards/idle/").json()
    assert [r["id"] for r in body["reclaimed"]] == [released.pk]
    assert body["reclaimed"][0]["released_gpu_hours"] == "6.0000"


def test_occupancy_scoped_to_members_teams(member, platform_admin, history):
    body = client_for(member).get("/api/v1/dashboards/occupancy/").json()
    assert body["count"] == 2
    assert trace_names(body["figures"]["gantt"]) == ["vision bookings"]
    body = client_for(platform_admin).get("/api/v1/dashboards/occupancy/").json()
    assert body["count"] == 3
    assert set(trace_names(body["figures"]["gantt"])) == {"vision bookings", "nlp bookings"}


def test_fleet_health_is_for_platform_admins(member, finance_user, platform_admin, history):
    assert client_for(member).get("/api/v1/dashboards/fleet-health/").status_code == 403
    assert client_for(finance_user).get("/api/v1/dashboards/fleet-health/").status_code == 403
    body = client_for(platform_admin).get("/api/v1/dashboards/fleet-health/").json()
    assert body["nodes"]["up"] == 3
    assert body["health"]["healthy"] == 20
    assert sorted(body["unreported"]) == ["h100-a", "h100-b", "l40s-a"]


def test_quota_pressure(member, platform_admin, quotas, history):
    body = client_for(platform_admin).get("/api/v1/dashboards/quota-pressure/").json()
    rows = {r["team"]: r for r in body["rows"]}
    assert rows["vision"]["held"] == 2 and rows["vision"]["limit"] == 12
    assert rows["nlp"]["held"] == 1 and rows["nlp"]["guaranteed"] == 8
    body = client_for(member).get("/api/v1/dashboards/quota-pressure/").json()
    assert [r["team"] for r in body["rows"]] == ["vision"]


def test_occupancy_and_quota_pressure_include_jobs(member, platform_admin, team, quotas, history):
    from datetime import timedelta

    from apps.jobs.models import Job, JobAllocation

    now = history["now"]

    def job(status, count):
        return Job.objects.create(
            team=team,
            submitted_by=member,
            name=f"{status} job",
            argv=["python", "train.py"],
            gpu_model=history["gpus"][0].model,
            gpu_count=count,
            max_runtime_seconds=3600,
            status=status,
            submitted_at=now - timedelta(hours=1),
        )

    running = job("running", 1)
    JobAllocation.objects.create(
        job=running, gpu=history["gpus"][5], attempt=1, start=now - timedelta(minutes=30)
    )
    job("queued", 6)
    body = client_for(member).get("/api/v1/dashboards/occupancy/").json()
    assert body["count"] == 3
    assert "vision jobs" in trace_names(body["figures"]["gantt"])
    rows = client_for(platform_admin).get("/api/v1/dashboards/quota-pressure/").json()["rows"]
    assert {r["team"]: r["waiting"] for r in rows} == {"vision": 6, "nlp": 0}


def test_idle_cost_at_list_price_when_priced(platform_admin, h100, history):
    from datetime import timedelta
    from decimal import Decimal

    from apps.billing.models import RateCard

    RateCard.objects.create(
        gpu_model=h100,
        price_per_gpu_hour=Decimal("2.50"),
        effective_from=history["now"] - timedelta(days=10),
    )
    by_kind = client_for(platform_admin).get("/api/v1/dashboards/idle/").json()["by_kind"]
    costs = {(r["kind"], r["model_name"]): r["cost"] for r in by_kind}
    assert costs[("held_idle", "H100-SXM-80GB")] == "5.00"  # 2 GPU-hours x 2.50
    assert costs[("unallocated", "L40S-48GB")] is None  # no rate card for L40S
