from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import factory

from apps.fleet.models import Gpu, GpuModel, Node
from apps.teams.choices import GlobalRole, TeamRole
from apps.teams.models import Membership, Team, User

TEST_PASSWORD = "correct-horse-battery"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.PostGenerationMethodCall("set_password", TEST_PASSWORD)

    @factory.post_generation
    def _save(obj, create, extracted, **kwargs):
        if create:
            obj.save()


class FinanceUserFactory(UserFactory):
    global_role = GlobalRole.FINANCE


class PlatformAdminFactory(UserFactory):
    global_role = GlobalRole.PLATFORM_ADMIN


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"team-{n}")
    name = factory.LazyAttribute(lambda t: t.slug.title())
    cost_center = factory.Sequence(lambda n: f"CC-{n:04d}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = TeamRole.MEMBER


class GpuModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuModel
        django_get_or_create = ("name",)

    name = "H100-SXM-80GB"
    memory_mib = 81559


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node
        django_get_or_create = ("hostname",)

    hostname = factory.Sequence(lambda n: f"node-{n:02d}")


class GpuFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Gpu

    node = factory.SubFactory(NodeFactory)
    index = factory.Sequence(lambda n: n % 64)
    uuid = factory.Sequence(lambda n: f"GPU-00000000-0000-0000-0000-{n:012d}")
    model = factory.SubFactory(GpuModelFactory)
    nvlink_domain = factory.LazyAttribute(lambda g: f"{g.node.hostname}/nvl0")
    # Test fleets have been in service all year, so past months bill their whole capacity.
    in_fleet_since = datetime(2026, 1, 1, tzinfo=UTC)


def make_node_with_gpus(hostname: str, count: int, model_name: str = "H100-SXM-80GB") -> Node:
    node = NodeFactory(hostname=hostname)
    model = GpuModelFactory(name=model_name)
    for index in range(count):
        GpuFactory(node=node, index=index, model=model, uuid=f"GPU-{hostname}-{index}")
    return node


# --- bookings, jobs, prices, budgets -----------------------------------------------------------


class ReservationFactory(factory.django.DjangoModelFactory):
    """A booking row written straight to the database (no quota or availability checks): the
    data of a scenario. Tests of the booking rules go through the services instead."""

    class Meta:
        model = "reservations.Reservation"

    team = factory.SubFactory(TeamFactory)
    created_by = factory.SubFactory(UserFactory)
    gpu_model = factory.LazyFunction(lambda: GpuModel.objects.first())
    count = 1
    start = datetime(2026, 11, 2, 9, tzinfo=UTC)
    end = factory.LazyAttribute(lambda o: o.start + timedelta(hours=2))
    status = "active"


def make_booking(team, user, gpus: list[Gpu], start, end, *, over_quota_gpus=None, **fields):
    """A booking of `team` holding exactly `gpus` over [start, end); the last
    `over_quota_gpus` of them above the guarantee (default: all of an over-quota booking)."""
    from apps.reservations.models import ReservationGpu

    if over_quota_gpus is None:
        over_quota_gpus = len(gpus) if fields.get("over_quota") else 0
    fields.setdefault("over_quota", over_quota_gpus > 0)

    reservation = ReservationFactory(
        team=team,
        created_by=user,
        gpu_model=gpus[0].model,
        count=len(gpus),
        start=start,
        end=end,
        **fields,
    )
    ReservationGpu.objects.bulk_create(
        ReservationGpu(
            reservation=reservation,
            gpu=gpu,
            start=start,
            end=end,
            over_quota=index >= len(gpus) - over_quota_gpus,
        )
        for index, gpu in enumerate(gpus)
    )
    return reservation


class JobFactory(factory.django.DjangoModelFactory):
    """A job row as the submit service would leave it (queued), without its checks."""

    class Meta:
        model = "jobs.Job"

    team = factory.SubFactory(TeamFactory)
    submitted_by = factory.SubFactory(UserFactory)
    argv = factory.LazyFunction(lambda: ["python", "train.py"])
    gpu_model = factory.LazyFunction(lambda: GpuModel.objects.first())
    gpu_count = 1
    max_runtime_seconds = 3600


class RateCardFactory(factory.django.DjangoModelFactory):
    """A price for a GPU model from the start of the year, open-ended."""

    class Meta:
        model = "billing.RateCard"

    gpu_model = factory.SubFactory(GpuModelFactory)
    price_per_gpu_hour = Decimal("2.50")
    effective_from = datetime(2026, 1, 1, tzinfo=UTC)


class BudgetFactory(factory.django.DjangoModelFactory):
    """A team's budget for one month (the period row is created if missing)."""

    class Meta:
        model = "billing.Budget"

    team = factory.SubFactory(TeamFactory)
    period = factory.LazyFunction(lambda: _billing_period(date(2026, 11, 1)))
    amount = Decimal("1000")


def _billing_period(month: date):
    from apps.billing.models import BillingPeriod

    return BillingPeriod.objects.get_or_create(month=month)[0]
