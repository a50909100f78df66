from django.contrib.auth.models import AbstractUser
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.db.models.expressions import RawSQL
from django.utils import timezone

from apps.teams.choices import ApiTokenScope, GlobalRole, TeamRole, UnitRole


class User(AbstractUser):
    """A portal user. `global_role` grants cross-team powers; superusers are platform admins."""

    global_role = models.CharField(
        max_length=32, choices=GlobalRole.choices, default=GlobalRole.NONE, blank=True
    )
    # Pages and e-mails show times in this zone (an IANA name); empty until the user picks one
    # or their browser first reports its zone (portal/timezones.py).
    time_zone = models.CharField(max_length=64, blank=True, default="")

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


# The units a user administers and every unit below them, as a subquery (no extra round trip;
# PostgreSQL and SQLite both walk the tree with a recursive CTE).
MANAGED_UNITS_SQL = """
WITH RECURSIVE managed(id) AS (
    SELECT unit_id FROM teams_unitmembership WHERE user_id = %s
    UNION
    SELECT u.id FROM teams_orgunit u JOIN managed m ON u.parent_id = m.id
) SELECT id FROM managed"""


def managed_units(user) -> RawSQL:
    """Ids of the units `user` administers as a unit admin, with their subtrees (a subquery)."""
    return RawSQL(MANAGED_UNITS_SQL, [user.pk])  # noqa: S611 - constant SQL, id as a parameter


class TeamQuerySet(models.QuerySet):
    def for_user(self, user) -> "TeamQuerySet":
        """Teams the user may see: all for finance and platform admins, else their own and
        every team below a unit they administer."""
        if not user.is_authenticated or not user.is_active:
            return self.none()
        if user.sees_all_teams:
            return self
        return self.filter(
            Q(pk__in=Membership.objects.filter(user=user).values("team_id"))
            | Q(unit_id__in=managed_units(user))
        )

    def member_of(self, user) -> "TeamQuerySet":
        """Active teams the user belongs to (where they may book and submit), whatever their
        portal-wide role."""
        if not user.is_authenticated or not user.is_active:
            return self.none()
        return self.filter(memberships__user=user, is_active=True).distinct()

    def managed_by(self, user) -> "TeamQuerySet":
        """Teams whose membership the user may change."""
        if not user.is_authenticated or not user.is_active:
            return self.none()
        if user.is_platform_admin:
            return self
        admin_of = Membership.objects.filter(user=user, role=TeamRole.TEAM_ADMIN)
        return self.filter(
            Q(pk__in=admin_of.values("team_id")) | Q(unit_id__in=managed_units(user))
        )


class TeamOwnedQuerySet(models.QuerySet):
    """For every model that belongs to a team: `for_user(user)` is what the user may see (all
    for finance and platform admins, else their teams' rows). Views and APIs start from it."""

    def for_user(self, user) -> "TeamOwnedQuerySet":
        return self.filter(team__in=Team.objects.for_user(user))


slug_validator = RegexValidator(
    r"^[a-z0-9][a-z0-9-]*$",
    "Use lowercase letters, digits and hyphens, starting with a letter or digit.",
)


class OrgUnitQuerySet(models.QuerySet):
    def managed_by(self, user) -> "OrgUnitQuerySet":
        """Units whose teams, members, child units and quotas below them the user may manage:
        all for platform admins, else those they administer and every unit below."""
        if not user.is_authenticated or not user.is_active:
            return self.none()
        if user.is_platform_admin:
            return self
        return self.filter(pk__in=managed_units(user))

    def for_user(self, user) -> "OrgUnitQuerySet":
        """Units the user may see: all for finance and platform admins; else those they
        manage and those on the path of their teams."""
        if not user.is_authenticated or not user.is_active:
            return self.none()
        if user.sees_all_teams:
            return self
        from apps.teams.org_tree import OrgTree

        tree = OrgTree(dict(OrgUnit.objects.values_list("pk", "parent_id")), {})
        homes = Team.objects.filter(memberships__user=user).values_list("unit_id", flat=True)
        on_paths = {unit for home in homes for unit in tree.ancestors(home)}
        return self.filter(Q(pk__in=on_paths) | Q(pk__in=managed_units(user)))


ROOT_UNIT_SLUG = "organisation"


class OrgUnit(models.Model):
    """A node of the organisation tree above teams (organisation > department > group ...),
    of any depth; teams are its leaves. A unit may cap and guarantee GPUs for all the teams
    below it (`UnitQuota`) and carries a cost centre for chargeback."""

    slug = models.SlugField(max_length=50, unique=True, validators=[slug_validator])
    name = models.CharField(max_length=200)
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="children",
        help_text="Empty: the root of the organisation.",
    )
    cost_center = models.CharField(
        max_length=64, blank=True, help_text="Finance cost-center code of the unit."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    admins = models.ManyToManyField(User, through="UnitMembership", related_name="units")

    objects = OrgUnitQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]
        verbose_name = "organisation unit"
        constraints = [
            models.CheckConstraint(
                condition=~models.Q(parent=models.F("id")),
                name="orgunit_not_its_own_parent",
                violation_error_message="A unit cannot be its own parent.",
            )
        ]

    def __str__(self) -> str:
        return self.slug


def root_unit_pk() -> int:
    """The unit a team joins unless told otherwise: the organisation's root, made on first
    use (a fresh install has one unit, and a flat list of teams behaves as before)."""
    unit = OrgUnit.objects.filter(parent__isnull=True).order_by("pk").first()
    if unit is None:
        unit, _ = OrgUnit.objects.get_or_create(
            slug=ROOT_UNIT_SLUG, defaults={"name": "Organisation"}
        )
    return unit.pk


class Team(models.Model):
    slug = models.SlugField(max_length=50, unique=True, validators=[slug_validator])
    unit = models.ForeignKey(
        OrgUnit,
        on_delete=models.PROTECT,
        related_name="teams",
        default=root_unit_pk,
        verbose_name="organisation unit",
        help_text="Where the team sits in the organisation tree.",
    )
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

    @property
    def is_team_admin(self) -> bool:
        return self.role == TeamRole.TEAM_ADMIN


class QuotaNumbers(models.Model):
    """What a team's and a unit's quota rows share: guaranteed GPUs and a burst limit."""

    guaranteed = models.PositiveIntegerField(default=0)
    limit = models.PositiveIntegerField(default=0, help_text="Burst ceiling, at least guaranteed.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


def quota_constraints(owner: str, prefix: str) -> list:
    """One row per owner (team or unit) and GPU model, one any-model row, limit >= guaranteed."""
    return [
        models.UniqueConstraint(
            fields=[owner, "gpu_model"],
            condition=models.Q(gpu_model__isnull=False),
            name=f"{prefix}_unique_{owner}_model",
            violation_error_message=f"The {owner} already has a quota for this GPU model.",
        ),
        models.UniqueConstraint(
            fields=[owner],
            condition=models.Q(gpu_model__isnull=True),
            name=f"{prefix}_unique_{owner}_any_model",
            violation_error_message=f"The {owner} already has an any-model quota.",
        ),
        models.CheckConstraint(
            condition=models.Q(limit__gte=models.F("guaranteed")),
            name=f"{prefix}_limit_gte_guaranteed",
            violation_error_message="The limit must be at least the guaranteed number of GPUs.",
        ),
    ]


class Quota(QuotaNumbers):
    """GPUs a team may hold at any instant, per GPU model (or across all models when blank).

    Up to `guaranteed` GPUs are never preempted; above it, up to `limit`, use is over-quota:
    allowed while capacity is free, flagged, preemptible and priced separately.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    gpu_model = models.ForeignKey(
        "fleet.GpuModel",
        verbose_name="GPU model",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="quotas",
        help_text="Blank: the quota caps the team's GPUs of all models together.",
    )

    objects = TeamOwnedQuerySet.as_manager()

    class Meta:
        ordering = ["team__slug", "gpu_model__name"]
        constraints = quota_constraints("team", "quota")

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.gpu_model or 'any model'}"


class UnitMembership(models.Model):
    """A unit admin: manages the teams, members, child units and quotas (within the unit's
    envelope) of everything below the unit. Their own unit's envelope is set above them."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="unit_memberships")
    unit = models.ForeignKey(OrgUnit, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=UnitRole.choices, default=UnitRole.UNIT_ADMIN)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["unit__slug", "user__username"]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "unit"],
                name="unitmembership_unique_user_unit",
                violation_error_message="This user is already an admin of the unit.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} admin of {self.unit}"


class UnitQuota(QuotaNumbers):
    """GPUs an organisation unit guarantees and caps for all the teams below it together, per
    GPU model (or all models when blank). The guarantees of what sits directly below (teams and
    child units) may not add up to more than the unit's guarantee; the limit caps their
    holdings together. A unit with no row for a model sets no envelope for it."""

    unit = models.ForeignKey(OrgUnit, on_delete=models.CASCADE, related_name="quotas")
    gpu_model = models.ForeignKey(
        "fleet.GpuModel",
        verbose_name="GPU model",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="unit_quotas",
        help_text="Blank: the quota caps the unit's GPUs of all models together.",
    )

    class Meta:
        ordering = ["unit__slug", "gpu_model__name"]
        constraints = quota_constraints("unit", "unitquota")

    def __str__(self) -> str:
        return f"{self.unit.slug}/{self.gpu_model or 'any model'}"


class ApiToken(models.Model):
    """A named API key of one user. Only a SHA-256 digest of the key is stored: the key itself
    is shown once, when it is created (see apps/teams/tokens.py)."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    scope = models.CharField(
        max_length=8, choices=ApiTokenScope.choices, default=ApiTokenScope.READ_ONLY
    )
    key_hash = models.CharField(max_length=64, unique=True)
    # The key's first characters, so its owner can tell which script uses which token.
    prefix = models.CharField(max_length=16)
    created_at = models.DateTimeField(auto_now_add=True)
    # Empty only for keys migrated from the single unnamed token of earlier versions.
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API token"
        constraints = [
            models.UniqueConstraint(
                fields=["user", "name"],
                condition=models.Q(revoked_at__isnull=True),
                name="api_token_unique_active_name",
                violation_error_message="You already have a token with this name.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} / {self.name}"

    def is_expired(self, now) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    @property
    def state(self) -> str:
        """revoked, expired or active (now)."""
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if self.is_expired(timezone.now()) else "active"

    @property
    def is_read_only(self) -> bool:
        return self.scope == ApiTokenScope.READ_ONLY
