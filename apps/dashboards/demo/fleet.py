"""The demo's people and fleet: teams, users (password DEMO_PASSWORD), quotas, a simulated
28-GPU fleet in service since HISTORY_DAYS ago, and a few current and upcoming bookings."""

import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from apps.fleet.models import Gpu, GpuModel, Node
from apps.reservations.models import Reservation
from apps.reservations.services import reservation_create
from apps.teams.choices import GlobalRole, TeamRole
from apps.teams.models import Membership, Quota, Team, User

TEAMS = [
    ("vision", "Computer Vision", "CC-1001"),
    ("nlp", "Natural Language Processing", "CC-1002"),
    ("speech", "Speech", "CC-1003"),
    ("robotics", "Robotics", "CC-1004"),
]
# username, global role, superuser, [(team, role)]
USERS = [
    ("alice", GlobalRole.NONE, False, [("vision", TeamRole.MEMBER)]),
    ("bob", GlobalRole.NONE, False, [("nlp", TeamRole.TEAM_ADMIN)]),
    ("fran", GlobalRole.FINANCE, False, []),
    ("admin", GlobalRole.PLATFORM_ADMIN, True, []),
]
GPU_MODELS = [
    ("H100-SXM-80GB", 81559),
    ("A100-SXM4-80GB", 81920),
    ("L40S-48GB", 46068),
]
# hostname, model, GPU count, NVLink: L40S is PCIe-only, so its node has no NVLink domain.
NODES = [
    ("gpu-h100-01", "H100-SXM-80GB", 8, True),
    ("gpu-h100-02", "H100-SXM-80GB", 8, True),
    ("gpu-a100-01", "A100-SXM4-80GB", 8, True),
    ("gpu-l40s-01", "L40S-48GB", 4, False),
]


# How long the demo fleet has been in service: its bookings, telemetry and charges start then.
HISTORY_DAYS = 30

# team, GPU model (None: all models), guaranteed, limit
QUOTAS = [
    ("vision", "H100-SXM-80GB", 4, 8),
    ("vision", "L40S-48GB", 2, 4),
    ("nlp", "H100-SXM-80GB", 8, 12),
    ("nlp", "A100-SXM4-80GB", 4, 8),
    ("speech", "A100-SXM4-80GB", 2, 4),
    ("speech", "L40S-48GB", 2, 4),
    ("robotics", "H100-SXM-80GB", 2, 4),
    ("robotics", None, 2, 6),
]


def demo_gpu_uuid(hostname: str, index: int) -> str:
    """A stable UUID per demo GPU, so seeding again finds the same GPUs."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{hostname}.gpu{index}.demo')}"


def seed_people_and_fleet(*, history_start: datetime) -> tuple[dict, dict]:
    """Create or update the demo's teams, users, GPU models, nodes, GPUs (in the fleet since
    `history_start`) and quotas; returns (teams by slug, GPU models by name)."""
    password = settings.DEMO_PASSWORD
    teams = {
        slug: Team.objects.update_or_create(
            slug=slug, defaults={"name": name, "cost_center": cost_center, "is_active": True}
        )[0]
        for slug, name, cost_center in TEAMS
    }
    for username, global_role, superuser, memberships in USERS:
        user, _ = User.objects.get_or_create(
            username=username, defaults={"email": f"{username}@example.com"}
        )
        user.global_role = global_role
        user.is_superuser = user.is_staff = superuser
        # A new hash would sign every demo user out (sessions carry a hash of it): only
        # when the password is not DEMO_PASSWORD already.
        if not user.check_password(password):
            user.set_password(password)
        user.save()
        for slug, role in memberships:
            Membership.objects.update_or_create(
                user=user, team=teams[slug], defaults={"role": role}
            )

    models = {
        name: GpuModel.objects.update_or_create(
            name=name, defaults={"memory_mib": memory, "vendor": "NVIDIA"}
        )[0]
        for name, memory in GPU_MODELS
    }
    for hostname, model_name, count, nvlink in NODES:
        node, _ = Node.objects.get_or_create(
            hostname=hostname, defaults={"labels": {"demo": "true", "simulated": "true"}}
        )
        for index in range(count):
            Gpu.objects.update_or_create(
                uuid=demo_gpu_uuid(hostname, index),
                defaults={
                    "node": node,
                    "index": index,
                    "model": models[model_name],
                    "nvlink_domain": f"{hostname}/nvl0" if nvlink else "",
                },
                create_defaults={
                    "node": node,
                    "index": index,
                    "model": models[model_name],
                    "nvlink_domain": f"{hostname}/nvl0" if nvlink else "",
                    "in_fleet_since": history_start,
                },
            )
    for slug, model_name, guaranteed, limit in QUOTAS:
        Quota.objects.update_or_create(
            team=teams[slug],
            gpu_model=models[model_name] if model_name else None,
            defaults={"guaranteed": guaranteed, "limit": limit},
        )
    return teams, models


def seed_bookings(teams, models) -> None:
    """A few bookings, running and upcoming, so the pages have something to show. Only on
    an empty database: a second run must not pile up more."""
    if Reservation.objects.exists():
        return
    now = timezone.now()
    this_slot = now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0)
    tomorrow_9 = (now + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)
    bookings = [
        ("nlp", "bob", "H100-SXM-80GB", 8, this_slot, 6, "pretraining run 14"),
        ("vision", "alice", "H100-SXM-80GB", 4, tomorrow_9, 4, "detector ablation"),
        ("vision", "alice", "L40S-48GB", 2, this_slot, 2, "notebook"),
        ("nlp", "bob", "A100-SXM4-80GB", 4, tomorrow_9 + timedelta(hours=2), 8, "eval sweep"),
    ]
    for slug, username, model, count, start, hours, purpose in bookings:
        reservation_create(
            team=teams[slug],
            user=User.objects.get(username=username),
            gpu_model=models[model],
            count=count,
            start=start,
            end=start + timedelta(hours=hours),
            purpose=purpose,
            same_node=True,
        )
