import pytest
from django.contrib.sessions.models import Session
from django.core.management import call_command
from django.utils import timezone

from apps.fleet.models import Gpu, Node
from apps.teams.choices import TeamRole
from apps.teams.models import Membership, Team, User

pytestmark = pytest.mark.django_db


def test_seed_demo_is_idempotent_and_builds_the_documented_fleet(settings):
    settings.DEMO_PASSWORD = "s3cret-demo"
    call_command("seed_demo")
    call_command("seed_demo")
    assert sorted(Team.objects.values_list("slug", flat=True)) == [
        "nlp",
        "robotics",
        "speech",
        "vision",
    ]
    assert Node.objects.count() == 4
    assert Gpu.objects.count() == 28
    per_model = {
        name: Gpu.objects.filter(model__name=name).count()
        for name in ("H100-SXM-80GB", "A100-SXM4-80GB", "L40S-48GB")
    }
    assert per_model == {"H100-SXM-80GB": 16, "A100-SXM4-80GB": 8, "L40S-48GB": 4}
    assert (
        Gpu.objects.filter(node__hostname="gpu-h100-01").values("nvlink_domain").distinct().count()
        == 1
    )
    alice = User.objects.get(username="alice")
    assert alice.check_password("s3cret-demo")
    assert Membership.objects.get(user__username="bob").role == TeamRole.TEAM_ADMIN
    assert User.objects.get(username="fran").is_finance
    assert User.objects.get(username="admin").is_platform_admin
    from apps.reservations.models import Reservation

    current = Reservation.objects.exclude(status="completed")
    assert current.count() == 4  # sample bookings, not doubled by the second run
    assert current.filter(status="active").count() == 2
    from apps.billing.models import Budget, LedgerEntry, RateCard

    # Five weeks of finished bookings, metered once: the second run added nothing.
    history = Reservation.objects.filter(status="completed")
    assert history.exists() and not history.filter(end__gt=timezone.now()).exists()
    charged = LedgerEntry.objects.filter(source="reservation").values("source_id").distinct()
    assert charged.count() == history.count()
    assert RateCard.objects.count() == 3 and Budget.objects.count() == 4


def test_running_seed_demo_again_keeps_everyone_signed_in(client, settings):
    """`make demo` seeds on every start: a second run must not sign the demo's users out."""
    call_command("seed_demo", "--without-reservations")
    signed_in = client.post(
        "/login/", {"username": "alice", "password": settings.DEMO_PASSWORD}, follow=False
    )
    assert signed_in.status_code == 302
    assert client.get("/reservations/").status_code == 200
    sessions_before = Session.objects.count()
    call_command("seed_demo", "--without-reservations")
    response = client.get("/reservations/")
    assert response.status_code == 200, response.get("Location")
    assert Session.objects.count() == sessions_before
    assert User.objects.get(username="alice").check_password(settings.DEMO_PASSWORD)


def test_seed_demo_gives_a_changed_demo_password(settings):
    call_command("seed_demo", "--without-reservations")
    settings.DEMO_PASSWORD = "another-demo-password"
    call_command("seed_demo", "--without-reservations")
    assert User.objects.get(username="bob").check_password("another-demo-password")
