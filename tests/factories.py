from datetime import UTC, datetime

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
