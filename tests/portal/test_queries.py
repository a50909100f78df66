"""Every query a lower app asks the apps above it is declared once, answered by the app the
declaration names, and answered in the declared shape (portal.queries)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.fleet.models import Gpu, Node
from apps.jobs.models import Job
from apps.reservations.models import Reservation
from apps.teams.models import Quota
from portal import hooks, queries
from tests.factories import MembershipFactory, TeamFactory, make_booking, make_node_with_gpus

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    now = timezone.now()
    node = make_node_with_gpus("gpu-q-01", 2)
    model = node.gpus.first().model
    team = TeamFactory(slug="vision")
    Quota.objects.create(team=team, gpu_model=model, guaranteed=1, limit=2)
    user = MembershipFactory(team=team).user
    return {"now": now, "team": team, "model": model, "user": user}


def _arguments(name: str, world: dict) -> dict:
    now, team, model = world["now"], world["team"], world["model"]
    return {
        "gpus.busy_intervals": {
            "start": now,
            "end": now + timedelta(hours=1),
            "gpu_ids": list(Gpu.objects.values_list("pk", flat=True)),
            "gpu_model": model,
            "team": None,
        },
        "teams.busy_intervals": {
            "start": now,
            "end": now + timedelta(hours=1),
            "teams": [team.pk],
        },
        "booking.busy_intervals": {
            "start": now,
            "end": now + timedelta(hours=1),
            "team": team,
            "gpu_model": model,
        },
        "gpus.bookings": {
            "start": now,
            "end": None,
            "gpu_ids": list(Gpu.objects.values_list("pk", flat=True)),
        },
        "gpus.leaving_service": {"gpu_ids": [], "actor": None, "during": None},
        "quota.usage": {"quotas": list(Quota.objects.all()), "now": now},
        "reservations.budget_check": {
            "team": team,
            "gpu_model": model,
            "count": 1,
            "start": now + timedelta(hours=1),
            "end": now + timedelta(hours=2),
            "over_quota_gpus": 0,
        },
        "jobs.figures": {"jobs": list(Job.objects.all())},
        "reservations.figures": {"reservations": list(Reservation.objects.all())},
        "teams.member_figures": {"team": team},
        "teams.member_costs": {"team": team, "month_text": None},
        "gpu_hours.price": {"hours_by_model": {model.name: (2.0, 0.5)}, "at": now},
        "energy.price": {"kwh_by_model": {model.name: 3.5}, "at": now},
        "fleet.node_notes": {"nodes": list(Node.objects.all())},
    }[name]


ANSWER_TYPES = {
    "gpus.busy_intervals": list,
    "teams.busy_intervals": list,
    "booking.busy_intervals": list,
    "gpus.bookings": dict,
    "gpus.leaving_service": dict,
    "quota.usage": dict,
    "reservations.budget_check": type(None),
    "jobs.figures": dict,
    "reservations.figures": dict,
    "teams.member_figures": dict,
    "teams.member_costs": (dict, type(None)),
    "gpu_hours.price": (Decimal, type(None)),
    "energy.price": (Decimal, type(None)),
    "fleet.node_notes": dict,
}


def test_every_declared_query_has_a_test_here():
    assert set(ANSWER_TYPES) == set(queries.QUERIES)


@pytest.mark.parametrize("name", sorted(queries.QUERIES))
def test_each_query_is_answered_by_the_declared_app_in_the_declared_shape(name, world):
    query = queries.QUERIES[name]
    answerers = hooks.subscribers(name)
    if name == "fleet.node_notes":  # only the Slurm integration answers, when enabled
        assert answerers == [] or all("slurm" in f.__module__ for f in answerers)
    else:
        owner = query.answered_by.split(" ")[0]
        assert answerers and all(f.__module__.startswith(f"apps.{owner}.") for f in answerers)
    for reply in queries.ask(name, **_arguments(name, world)):
        assert isinstance(reply, ANSWER_TYPES[name]), (name, reply)


def test_the_quota_usage_answer_counts_a_booking(world):
    now, team, model = world["now"], world["team"], world["model"]
    gpu = Gpu.objects.filter(model=model).first()
    make_booking(team, world["user"], [gpu], now - timedelta(minutes=5), now + timedelta(hours=1))
    (usage,) = queries.ask("quota.usage", quotas=list(Quota.objects.all()), now=now)
    assert usage[Quota.objects.get().pk]["in_use"] == 1


def test_the_teams_busy_intervals_answer_names_each_running_jobs_team_and_model(world):
    from apps.jobs.choices import JobStatus
    from apps.jobs.models import JobAllocation
    from tests.factories import JobFactory

    now, team, model = world["now"], world["team"], world["model"]
    gpu = Gpu.objects.filter(model=model).first()
    job = JobFactory(
        team=team,
        submitted_by=world["user"],
        status=JobStatus.RUNNING,
        started_at=now - timedelta(minutes=5),
        gpu_model=model,
    )
    JobAllocation.objects.create(job=job, gpu=gpu, start=now - timedelta(minutes=5))
    other = TeamFactory(slug="nlp")
    (found,) = queries.ask(
        "teams.busy_intervals", start=now, end=now + timedelta(hours=2), teams=[team.pk]
    )
    assert [(t, m) for t, m, _, _ in found] == [(team.pk, model.name)]
    (none,) = queries.ask(
        "teams.busy_intervals", start=now, end=now + timedelta(hours=2), teams=[other.pk]
    )
    assert none == []


def test_the_booking_busy_intervals_answer_is_the_teams_jobs_and_the_models(world):
    """The team's job on another model (its quota counts it) and another team's job on the
    model (a booking cannot take its GPU); not another team's job on another model."""
    from apps.jobs.choices import JobStatus
    from apps.jobs.models import JobAllocation
    from tests.factories import JobFactory

    now, team, model = world["now"], world["team"], world["model"]
    other = TeamFactory(slug="nlp")
    gpu = Gpu.objects.filter(model=model).first()
    elsewhere = make_node_with_gpus("gpu-l40s-01", 2, model_name="L40S-48GB").gpus.all()
    for job_team, job_gpu in ((team, elsewhere[0]), (other, gpu), (other, elsewhere[1])):
        job = JobFactory(
            team=job_team,
            status=JobStatus.RUNNING,
            started_at=now - timedelta(minutes=5),
            gpu_model=job_gpu.model,
        )
        JobAllocation.objects.create(job=job, gpu=job_gpu, start=now - timedelta(minutes=5))
    (found,) = queries.ask(
        "booking.busy_intervals",
        start=now,
        end=now + timedelta(hours=2),
        team=team,
        gpu_model=model,
    )
    assert sorted((g, t, m) for g, t, m, _, _ in found) == sorted(
        [(elsewhere[0].pk, team.pk, "L40S-48GB"), (gpu.pk, other.pk, model.name)]
    )
    assert all(s < e for _, _, _, s, e in found)


def test_asking_with_other_arguments_than_declared_is_refused():
    with pytest.raises(TypeError, match="takes exactly jobs"):
        queries.ask("jobs.figures", jobs=[], now=None)
    with pytest.raises(LookupError):
        queries.ask("jobs.undeclared")
    with pytest.raises(LookupError):
        queries.answer("jobs.undeclared", print)


def test_a_query_cannot_be_emitted_as_an_event():
    with pytest.raises(LookupError, match="is a query"):
        hooks.emit("quota.usage", quotas=[], now=None)


def test_the_bookings_answer_names_each_gpus_bookings_over_the_span(world):
    now, team, model = world["now"], world["team"], world["model"]
    first, second = Gpu.objects.filter(model=model).order_by("pk")
    booking = make_booking(team, world["user"], [first], now, now + timedelta(hours=1))
    (later,) = queries.ask(
        "gpus.bookings",
        start=now + timedelta(hours=1),
        end=None,
        gpu_ids=[first.pk, second.pk],
    )
    assert later == {}  # half-open: it ends as the span starts
    (during,) = queries.ask("gpus.bookings", start=now, end=None, gpu_ids=[first.pk, second.pk])
    assert during == {first.pk: {booking.pk}}
