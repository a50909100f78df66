"""Create the demo's teams, users and simulated fleet. Safe to run again: it converges."""

import uuid
from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from apps.fleet.models import Gpu, GpuModel, Node
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
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{hostname}.gpu{index}.demo')}"


class Command(BaseCommand):
    help = "Seed demo teams, users (password DEMO_PASSWORD), quotas and a simulated 28-GPU fleet."

    def add_arguments(self, parser):
        parser.add_argument(
            "--without-reservations",
            action="store_true",
            help="Seed no sample bookings (tests that need an empty calendar).",
        )

    @transaction.atomic
    def handle(self, *args, **options):
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
        now = timezone.now()
        history_start = (now - timedelta(days=HISTORY_DAYS)).replace(
            minute=0, second=0, microsecond=0
        )
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
        if not options["without_reservations"]:
            self._seed_reservations(teams, models)
            from apps.billing.demo import meter_billing_demo, seed_billing_history
            from apps.dashboards.demo import seed_dashboard_history
            from apps.dashboards.demo_jobs import seed_demo_jobs

            # Bookings first, then the telemetry they caused, then the jobs in the gaps between
            # bookings (their hours rewritten), then the charges: metering reads busy hours and
            # energy from that telemetry, and charges jobs from their allocations.
            seed_billing_history(start=history_start, now=now)
            seed_dashboard_history(now=now, days=HISTORY_DAYS)
            seed_demo_jobs(start=history_start, now=now)
            meter_billing_demo(start=history_start, now=now)
        self.stdout.write(
            self.style.SUCCESS(
                f"Seeded {Team.objects.count()} teams, {User.objects.count()} users, "
                f"{Node.objects.count()} nodes, {Gpu.objects.count()} GPUs."
            )
        )

    def _seed_reservations(self, teams, models) -> None:
        """A few bookings, running and upcoming, so the pages have something to show. Only on
        an empty database: a second run must not pile up more."""
        from apps.reservations.models import Reservation
        from apps.reservations.services import reservation_create

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
