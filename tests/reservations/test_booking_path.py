"""The booking path's cost and its GPU picking: a fixed number of queries per booking, however
large the fleet, and the one-query pick choosing exactly the GPUs a pick over every free GPU
would."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.fleet.choices import GpuHealth, GpuStatus, NodeStatus, PowerState
from apps.fleet.models import Gpu, MaintenanceWindow, Node
from apps.jobs.choices import JobStatus
from apps.jobs.models import JobAllocation
from apps.reservations import availability, picking, selectors
from apps.reservations.holdings import held_outside_bookings
from apps.reservations.models import ReservationGpu
from tests.conftest import client_for
from tests.factories import JobFactory, ReservationFactory, make_node_with_gpus
from tests.reservations.conftest import booking

pytestmark = pytest.mark.django_db

URL = "/api/v1/reservations/"
# The team (with the caller's membership) and the model (with its fleet size), in one query;
# begin; the quota rows locked, the units' quota rows locked (none here: no tree read) and the
# team's holdings, in one round trip; running jobs of the team or the model (read once: the
# quota counts the team's, the pick skips the model's), the budget's period, the powered-down
# nodes ready by the start, the booking's row, the picking lock with the pick and its holdings
# (one statement), commit; the reply's figures (its GPUs are the ones the pick read). On SQLite
# the three admission reads run one after another.
QUERIES_PER_BOOKING = 10


@pytest.mark.parametrize("nodes", [2, 12])
def test_a_booking_costs_the_same_few_queries_whatever_the_fleet(
    django_assert_max_num_queries, member, team, quotas, h100, tomorrow_9, nodes
):
    for i in range(nodes - 2):
        make_node_with_gpus(f"h100-extra-{i:02d}", 8)
    api = client_for(member)
    # Earlier bookings of the team and the model, which the quota and the pick read past.
    for hour in range(3):
        start = tomorrow_9 + timedelta(hours=hour)
        assert api.post(URL, booking(count=3, start=start), format="json").status_code == 201
    with django_assert_max_num_queries(QUERIES_PER_BOOKING):
        response = api.post(URL, booking(count=4, start=tomorrow_9), format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert len(body["gpus"]) == 4 and len({g["node"] for g in body["gpus"]}) == 1
    # The reply's GPUs, built from the pick, are the ones the database holds.
    booked = api.get(f"{URL}{body['id']}/").json()
    assert sorted(body["gpus"], key=str) == sorted(booked["gpus"], key=str)
    assert body["cost"] is not None and body["efficiency"] is None


def test_a_unit_admin_who_sees_a_team_but_is_no_member_may_not_book_for_it(
    platform_admin, h100, tomorrow_9
):
    """The team field reads the caller's membership with the team; a team seen through a unit
    the caller administers is no membership."""
    from tests.teams.departments import build_departments

    org = build_departments(platform_admin, h100)
    unit_admin = org["users"]["la"]
    response = client_for(unit_admin).post(
        URL, booking(team="cv", count=1, start=tomorrow_9), format="json"
    )
    assert response.status_code == 400, response.json()
    assert "not a member" in str(response.json())
    assert not ReservationGpu.objects.exists()
    member = client_for(org["users"]["cv-member"])
    booked = member.post(URL, booking(team="cv", count=1, start=tomorrow_9), format="json")
    assert booked.status_code == 201, booked.json()


def test_more_gpus_than_the_fleet_has_are_refused_with_its_size_read_with_the_model(
    member, team, quotas, h100, tomorrow_9
):
    Gpu.objects.filter(node__hostname="h100-b", index=7).update(status=GpuStatus.RETIRED)
    response = client_for(member).post(URL, booking(count=16, start=tomorrow_9), format="json")
    assert response.status_code == 400, response.json()
    assert "The fleet has only 15 H100-SXM-80GB GPUs" in str(response.json())
    assert not ReservationGpu.objects.exists()


def test_running_jobs_count_against_the_teams_quota_and_are_not_picked(
    member, team, other_team, quotas, h100, tomorrow_9
):
    """The team's job on another model counts against its any-model quota; another team's job
    on the model keeps its GPUs from the pick."""
    from apps.fleet.models import GpuModel
    from apps.teams.models import Quota

    Quota.objects.create(team=team, gpu_model=None, guaranteed=0, limit=14)
    now = timezone.now()
    l40s = GpuModel.objects.get(name="L40S-48GB")
    for job_team, model, hostname in ((team, l40s, "l40s-a"), (other_team, h100, "h100-a")):
        gpus = list(Gpu.objects.filter(node__hostname=hostname))
        job = JobFactory(
            team=job_team, gpu_model=model, status=JobStatus.RUNNING, gpu_count=len(gpus),
            max_runtime_seconds=3 * 86400, started_at=now,
        )  # fmt: skip
        for gpu in gpus:
            JobAllocation.objects.create(job=job, gpu=gpu, start=now)
    api = client_for(member)
    booked = api.post(URL, booking(count=8, start=tomorrow_9), format="json")
    assert booked.status_code == 201, booked.json()
    assert {g["node"] for g in booked.json()["gpus"]} == {"h100-b"}
    refused = api.post(URL, booking(count=3, start=tomorrow_9, hours=4), format="json")
    assert refused.status_code == 403, refused.json()
    assert refused.json()["detail"]["booked"] == 12  # 8 H100 booked, 4 L40S running
    assert ReservationGpu.objects.count() == 8


def test_a_lost_race_on_the_exclusion_constraint_is_rolled_back_and_booked_again(
    monkeypatch, member, team, quotas, h100, tomorrow_9
):
    """A writer outside the picking lock (an extension, a relocation) took the GPU the first
    attempt picked: the database refuses the holding, nothing of that attempt stays, and the
    second attempt books a GPU that is free."""
    from apps.reservations.services import reservation_create

    end = tomorrow_9 + timedelta(hours=2)
    taken = reservation_create(
        team=team, user=member, gpu_model=h100, count=1, start=tomorrow_9, end=end
    )
    taken_gpu = taken.holdings.get().gpu
    real_hold = picking.FreeGpus.hold_on_best_fitting_node
    calls = []

    def stale_hold(free, count, **kwargs):
        calls.append(count)
        if len(calls) == 1:  # as picked before the other writer committed
            ReservationGpu.objects.create(
                reservation_id=kwargs["reservation_id"],
                gpu=taken_gpu,
                start=kwargs["start"],
                end=kwargs["end"],
            )
        return real_hold(free, count, **kwargs)

    monkeypatch.setattr(picking.FreeGpus, "hold_on_best_fitting_node", stale_hold)
    second = reservation_create(
        team=team, user=member, gpu_model=h100, count=1, start=tomorrow_9, end=end
    )
    assert len(calls) == 2
    assert second.holdings.get().gpu_id != taken_gpu.pk
    assert ReservationGpu.objects.filter(active=True).count() == 2
    assert set(team.reservations.values_list("pk", flat=True)) == {taken.pk, second.pk}


@pytest.fixture
def messy_fleet(fleet, team, member, h100, tomorrow_9):
    """Eight H100 nodes with every reason a GPU is not free over tomorrow 9:00-11:00: booked,
    drained, unhealthy, a node down, a node in maintenance, a running job, a node that did not
    power on; and a MIG slice. A node powered off to save energy can be woken by then."""
    for hostname in ("h100-c", "h100-d", "h100-e", "h100-f", "h100-g", "h100-h"):
        make_node_with_gpus(hostname, 8)
    Node.objects.filter(hostname="h100-g").update(power_state=PowerState.OFF)
    Node.objects.filter(hostname="h100-h").update(power_state=PowerState.RESUME_FAILED)
    window = (tomorrow_9, tomorrow_9 + timedelta(hours=2))
    gpus = {(g.node.hostname, g.index): g for g in Gpu.objects.select_related("node")}
    held = ReservationFactory(team=team, created_by=member, gpu_model=h100, status="scheduled")
    for index in (0, 1, 2):  # h100-a keeps 5 free
        ReservationGpu.objects.create(
            reservation=held, gpu=gpus["h100-a", index], start=window[0], end=window[1]
        )
    # h100-b: a holding that ends as the window starts does not hold it; an inactive one
    # (cancelled) neither.
    ReservationGpu.objects.create(
        reservation=held, gpu=gpus["h100-b", 0], start=window[0] - timedelta(hours=1),
        end=window[0],
    )  # fmt: skip
    ReservationGpu.objects.create(
        reservation=held, gpu=gpus["h100-b", 1], start=window[0], end=window[1], active=False
    )
    Gpu.objects.filter(pk=gpus["h100-c", 0].pk).update(status=GpuStatus.DRAINED)
    Gpu.objects.filter(pk=gpus["h100-c", 1].pk).update(health=GpuHealth.DEGRADED)
    Gpu.objects.create(
        node=gpus["h100-c", 2].node, index=2, uuid="MIG-h100-c-2-a", model=h100,
        mig_parent=gpus["h100-c", 2], mig_profile="1g.10gb",
    )  # fmt: skip
    Node.objects.filter(hostname="h100-d").update(status=NodeStatus.UNREACHABLE)
    MaintenanceWindow.objects.create(
        node=gpus["h100-e", 0].node, start=window[1] - timedelta(minutes=15),
        end=window[1] + timedelta(hours=1), reason="firmware",
    )  # fmt: skip
    now = timezone.now()
    job = JobFactory(
        team=team, status=JobStatus.RUNNING, gpu_count=3, max_runtime_seconds=3 * 86400,
        started_at=now,
    )  # fmt: skip
    for index in (0, 1, 2, 3):  # h100-f keeps 4 free
        JobAllocation.objects.create(job=job, gpu=gpus["h100-f", index], start=now)
    return window


def _held_by_jobs(h100, window):
    return {
        gpu_id
        for gpu_id, _, _ in held_outside_bookings(start=window[0], end=window[1], gpu_model=h100)
    }


@pytest.mark.parametrize(("count", "node"), [(1, "h100-f"), (4, "h100-f"), (5, "h100-a")])
@pytest.mark.parametrize("same_node", [False, True])
def test_the_one_query_pick_books_what_a_pick_over_every_free_gpu_would(
    messy_fleet, h100, count, node, same_node
):
    start, end = messy_fleet
    held = _held_by_jobs(h100, messy_fleet)
    every_free = selectors.schedulable_gpus(gpu_model=h100, free_from=start, free_until=end)
    free = picking.FreeGpus.of(gpu_model=h100, start=start, end=end, held_elsewhere=held)
    assert sorted(free.all()) == sorted(every_free)
    candidates = free.on_best_fitting_node(count)
    assert {g.node for g in candidates} == {node}
    picked = availability.pick_gpus(candidates, count, same_node=same_node)
    assert picked == availability.pick_gpus(every_free, count, same_node=same_node)
    assert len(picked) == count


@pytest.mark.parametrize(("count", "node"), [(1, "h100-f"), (4, "h100-f"), (5, "h100-a")])
def test_the_pick_in_the_holdings_insert_holds_what_a_pick_over_every_free_gpu_would(
    messy_fleet, team, member, h100, count, node
):
    start, end = messy_fleet
    held = _held_by_jobs(h100, messy_fleet)
    every_free = selectors.schedulable_gpus(gpu_model=h100, free_from=start, free_until=end)
    reservation = ReservationFactory(
        team=team, created_by=member, gpu_model=h100, count=count, start=start, end=end
    )
    free = picking.FreeGpus.of(gpu_model=h100, start=start, end=end, held_elsewhere=held)
    held_now = free.hold_on_best_fitting_node(
        count, reservation_id=reservation.pk, start=start, end=end, guaranteed=count - 1
    )
    picked = [gpu for _, gpu in held_now]
    assert picked == availability.pick_gpus(every_free, count, same_node=False)
    assert {g.node for g in picked} == {node}
    rows = {h.pk: h for h in ReservationGpu.objects.filter(reservation=reservation)}
    assert sorted(rows) == sorted(pk for pk, _ in held_now)
    for place, (pk, gpu) in enumerate(held_now):
        row = rows[pk]
        assert (row.gpu_id, row.start, row.end, row.active) == (gpu.id, start, end, True)
        assert row.over_quota == (place == count - 1)  # the last one is above the guarantee


def test_the_pick_in_the_holdings_insert_holds_nothing_when_no_node_fits(
    messy_fleet, team, member, h100
):
    start, end = messy_fleet
    reservation = ReservationFactory(
        team=team, created_by=member, gpu_model=h100, count=9, start=start, end=end
    )
    free = picking.FreeGpus.of(
        gpu_model=h100, start=start, end=end, held_elsewhere=_held_by_jobs(h100, messy_fleet)
    )
    assert (
        free.hold_on_best_fitting_node(
            9, reservation_id=reservation.pk, start=start, end=end, guaranteed=9
        )
        == []
    )
    assert not ReservationGpu.objects.filter(reservation=reservation).exists()


def test_free_gpus_per_node_and_no_candidates_when_no_node_fits(messy_fleet, h100):
    start, end = messy_fleet
    held = _held_by_jobs(h100, messy_fleet)
    # Free: h100-a 5, h100-b 8, h100-c 6 (one drained, one degraded; a MIG slice is no whole
    # GPU), h100-f 4, h100-g 8 (off, woken for it); h100-d is down, h100-e in maintenance,
    # h100-h did not power on.
    free = picking.FreeGpus.of(gpu_model=h100, start=start, end=end, held_elsewhere=held)
    every_free = free.all()
    by_node = {n: sum(g.node == n for g in every_free) for n in {g.node for g in every_free}}
    assert by_node == {"h100-a": 5, "h100-b": 8, "h100-c": 6, "h100-f": 4, "h100-g": 8}
    assert free.on_best_fitting_node(9) == []
    # Taking the lock in the same round trip reads the same rows.
    assert sorted(free.on_best_fitting_node(8, after_lock=(1, 2))) == sorted(
        g for g in every_free if g.node == "h100-b"
    )


def test_the_booking_forms_team_and_model_errors(
    member, outsider, finance_user, team, other_team, quotas, h100, tomorrow_9
):
    """The team and the GPU model are read together; each still answers its own field's error:
    a team the caller cannot see is no team, one they see without belonging to it is refused,
    an unknown model is named, and an inactive team is refused once both are found."""
    api = client_for(member)

    def errors(user, **fields):
        response = client_for(user).post(URL, booking(start=tomorrow_9, **fields), format="json")
        assert response.status_code == 400, response.json()
        return response.json()

    assert errors(member, team="nowhere", gpu_model="B200")["detail"] == {
        "team": ["Object with slug=nowhere does not exist."],
        "gpu_model": ["Object with name=B200 does not exist."],
    }
    assert errors(member, team="nlp")["detail"] == {
        "team": ["Object with slug=nlp does not exist."]
    }
    assert errors(member, team=7)["detail"] == {"team": ["Object with slug=7 does not exist."]}
    assert errors(finance_user, team="nlp")["detail"] == {
        "team": ["You are not a member of this team."]
    }
    other_team.is_active = False
    other_team.save()
    assert errors(outsider, team="nlp")["detail"] == {"team": ["Team nlp is inactive."]}
    assert not ReservationGpu.objects.exists()
    booked = api.post(URL, booking(count=1, start=tomorrow_9), format="json")
    assert booked.status_code == 201, booked.json()
