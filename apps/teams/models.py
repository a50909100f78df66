from django.contrib.auth.models import AbstractUser
from django.core.validators import RegexValidator
from django.db import models

from apps.teams.choices import GlobalRole, TeamRole


class User(AbstractUser):
    """A portal user. `global_role` grants cross-team powers; superusers are platform admins."""

    global_role = models.CharField(
        max_length=32, choices=GlobalRole.choices, default=GlobalRole.NONE, blank=True
    )

    @property
    def is_platform_admin(self) -> bool:
        return self.is_active and (
            self.is_superuser or self.global_role == GlobalRole.PLATFORM_ADMIN
        )

    @property
    def is_finance(self) -> bool:
        return self.is_active and self.global_role == GlobalRole.FINANCE

    @property
    def sees_all_teams(self) -> bool:
        return self.is_platform_admin or self.is_finance


class TeamQuerySet(models.QuerySet):
    def for_user(self, user) -> "TeamQuerySet":
        """Teams the user may see: all for finance and platform admins, else their own."""
        if not user.is_authenticated or not user.is_active:
            return self.none()
        if user.sees_all_teams:
            return self
        return self.filter(memberships__user=user).distinct()

    def managed_by(self, user) -> "TeamQuerySet":
        """Teams whose membership the user may change."""
        if not user.is_authenticated or not user.is_active:
            return self.none()
        if user.is_platform_admin:
            return self
        return self.filter(memberships__user=user, memberships__role=TeamRole.TEAM_ADMIN).distinct()


slug_validator = RegexValidator(
    r"^[a-z0-9][a-z0-9-]*$",
    "Use lowercase letters, digits and hyphens, starting with a letter or digit.",
)


class Team(models.Model):
    slug = models.SlugField(max_length=50, unique=True, validators=[slug_validator])
    name = models.CharField(max_length=200)
    cost_center = models.CharField(
        max_length=64, blank=True, help_text="Finance cost-center code charged for this team."
    )
    is_active = models.BooleanField(default=True)
    idle_reclaim = models.BooleanField(
        default=True,
        help_text="Release this team's bookings whose GPUs sit idle (after a warning).",
    )
    idle_grace_minutes = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Minutes between the idle warning and the release; empty: the portal default.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    members = models.ManyToManyField(User, through="Membership", related_name="teams")

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=TeamRole.choices, default=TeamRole.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team__slug", "user__username"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "team"],
                name="membership_unique_user_team",
                violation_error_message="This user is already a member of the team.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class Quota(models.Model):
    """GPUs a team may hold at any instant, per GPU model (or across all models when blank).

    Up to `guaranteed` GPUs are never preempted; above it, up to `limit`, use is over-quota:
    allowed while capacity is free, flagged, preemptible and priced separately.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    gpu_model = models.ForeignKey(
        "fleet.GpuModel",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="quotas",
        help_text="Blank: the quota caps the team's GPUs of all models together.",
    )
    guaranteed = models.PositiveIntegerField(default=0)
    limit = models.PositiveIntegerField(default=0, help_text="Burst ceiling, at least guaranteed.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__slug", "gpu_model__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "gpu_model"],
                condition=models.Q(gpu_model__isnull=False),
                name="quota_unique_team_model",
                violation_error_message="The team already has a quota for this GPU model.",
            ),
            models.UniqueConstraint(
                fields=["team"],
                condition=models.Q(gpu_model__isnull=True),
                name="quota_unique_team_any_model",
                violation_error_message="The team already has an any-model quota.",
            ),
            models.CheckConstraint(
                condition=models.Q(limit__gte=models.F("guaranteed")),
                name="quota_limit_gte_guaranteed",
                violation_error_message="The limit must be at least the guaranteed number of GPUs.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.gpu_model or 'any model'}"
