from django.db import models

from apps.sso.choices import GLOBAL_ROLES, TEAM_ROLES, MappedRole
from apps.teams.models import Team, User


class GroupMapping(models.Model):
    """Members of IdP group `group` get `role`: in `team` for team roles, portal-wide otherwise.

    A team that any mapping names is managed by the IdP: at each sign-in its memberships follow
    the user's groups (added, changed, removed). Teams no group maps to are managed in the portal.
    Likewise for the finance and platform-admin roles.
    """

    group = models.CharField(
        max_length=200, help_text="Group name exactly as the identity provider sends it."
    )
    role = models.CharField(max_length=16, choices=MappedRole.choices)
    team = models.ForeignKey(
        Team,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="sso_group_mappings",
        help_text="Required for team roles; empty for finance and platform admin.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["group", "role"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(role__in=[r.value for r in TEAM_ROLES], team__isnull=False)
                    | models.Q(role__in=[r.value for r in GLOBAL_ROLES], team__isnull=True)
                ),
                name="sso_mapping_team_matches_role",
                violation_error_message=(
                    "Team roles need a team; finance and platform admin apply to all teams "
                    "and take none."
                ),
            ),
            models.UniqueConstraint(
                fields=["group", "team"],
                condition=models.Q(team__isnull=False),
                name="sso_mapping_unique_group_team",
                violation_error_message="This group already maps to a role in this team.",
            ),
            models.UniqueConstraint(
                fields=["group", "role"],
                condition=models.Q(team__isnull=True),
                name="sso_mapping_unique_group_global_role",
                violation_error_message="This group already maps to this role.",
            ),
        ]

    def __str__(self) -> str:
        where = f" in {self.team.slug}" if self.team_id else ""
        return f"{self.group} → {self.get_role_display()}{where}"


class SsoIdentity(models.Model):
    """Which IdP account (issuer + subject, stable even when names change) a user signs in as."""

    user = models.OneToOneField(User, on_delete=models.CASCADE, related_name="sso_identity")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)
    # Groups sent at the last sign-in or check, to explain a user's teams.
    last_groups = models.JSONField(default=list, blank=True)
    # The IdP's refresh token from the last sign-in, encrypted with a key derived from
    # DJANGO_SECRET_KEY (apps/sso/sealing.py): lets the periodic check ask the IdP about the
    # user while they are away. Empty when the IdP issued none or no longer honours it.
    refresh_token = models.TextField(blank=True, default="")
    last_checked_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Last time the periodic check reached the IdP for this user.",
    )

    class Meta:
        verbose_name = "SSO identity"
        verbose_name_plural = "SSO identities"
        constraints = [
            models.UniqueConstraint(
                fields=["issuer", "subject"],
                name="sso_identity_unique_subject",
                violation_error_message="This IdP account is already linked to a user.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} ({self.subject} at {self.issuer})"
