"""Team quotas mirrored as Slurm association limits (GrpTRES)."""

import getpass

from django.conf import settings
from django.db import transaction

from apps.audit.services import audit_record
from apps.integrations.slurm.client import (
    SlurmError,
    parse_tres,
)
from apps.integrations.slurm.services.common import _refused, client, gpu_type
from apps.teams.models import Quota, Team


def desired_limits(team: Team) -> tuple[dict[str, str], int]:
    """The team's quota as Slurm limits: GrpTRES per gres type (`gres/gpu:<type>`; the
    any-model quota as `gres/gpu`) from the limits, and a Fairshare from the guarantees."""
    tres: dict[str, str] = {}
    guaranteed = 0
    for quota in Quota.objects.filter(team=team).select_related("gpu_model"):
        key = f"gres/gpu:{gpu_type(quota.gpu_model)}" if quota.gpu_model_id else "gres/gpu"
        tres[key] = str(quota.limit)
        guaranteed += quota.guaranteed
    return tres, max(guaranteed, 1)


def _submit_user() -> str:
    return settings.SLURM_SUBMIT_USER or getpass.getuser()


def limits_drift(team: Team) -> dict | None:
    """How the team's Slurm account differs from its quotas, without changing anything:
    {"slurm": {...}, "portal": {...}} (Slurm's side None when it has no account), or None."""
    current = client().account_limits(team.slug)
    want, fairshare = desired_limits(team)
    portal = {"grptres": ",".join(f"{k}={v}" for k, v in sorted(want.items())),
              "fairshare": str(fairshare)}  # fmt: skip
    if current is None:
        return {"slurm": None, "portal": portal}
    have = {k: v for k, v in parse_tres(current["grptres"]).items() if k.startswith("gres/gpu")}
    if have == want and current["fairshare"] == str(fairshare):
        return None
    return {"slurm": current, "portal": portal}


def quota_sync_team(*, team: Team, actor=None, reason: str = "") -> dict | None:
    """Make the team's Slurm account match its quotas: create the account (and the submit
    user's association) if missing, set GrpTRES and Fairshare where they drifted. Idempotent;
    each correction is audited with what Slurm had before. Returns the change, or None."""
    slurm = client()
    cluster = [f"cluster={settings.SLURM_CLUSTER}"] if settings.SLURM_CLUSTER else []
    current = slurm.account_limits(team.slug)
    created = current is None
    if created:
        slurm.sacctmgr(
            "add",
            "account",
            team.slug,
            f"Description={team.name or team.slug}",
            "Organization=portal",
            *cluster,
        )
        current = {"grptres": "", "fairshare": "1"}
    user = _submit_user()
    if user not in slurm.account_users(team.slug):
        slurm.sacctmgr("add", "user", user, f"Account={team.slug}", *cluster)
    have = {k: v for k, v in parse_tres(current["grptres"]).items() if k.startswith("gres/gpu")}
    want, fairshare = desired_limits(team)
    changes = dict(want.items() - have.items())
    changes.update({key: "-1" for key in have if key not in want})
    fairshare_changed = current["fairshare"] != str(fairshare)
    if not changes and not fairshare_changed and not created:
        return None
    settings_args = []
    if changes:
        settings_args.append("GrpTRES=" + ",".join(f"{k}={v}" for k, v in sorted(changes.items())))
    if fairshare_changed:
        settings_args.append(f"Fairshare={fairshare}")
    if settings_args:
        slurm.sacctmgr("modify", "account", "where", f"name={team.slug}", *cluster, "set",
                       *settings_args)  # fmt: skip
    change = {
        "before": {"grptres": current["grptres"], "fairshare": current["fairshare"]},
        "after": {
            "grptres": ",".join(f"{k}={v}" for k, v in sorted(want.items())),
            "fairshare": str(fairshare),
        },
    }
    audit_record(
        actor=actor,
        action="slurm.account_create" if created else "slurm.limits_sync",
        target=team,
        before=None if created else change["before"],
        after=change["after"],
        reason=reason or ("account created" if created else "Slurm limits differed from quota"),
    )
    return change


def quotas_sync(*, actor=None) -> dict[str, dict]:
    """Sync every active team's account (the beat task; also corrects edits made in Slurm)."""
    report = {}
    for team in Team.objects.filter(is_active=True).order_by("slug"):
        with transaction.atomic():
            change = quota_sync_team(team=team, actor=actor)
        if change:
            report[team.slug] = change
    return report


def on_quota_changed(*, quota: Quota, actor=None, **_) -> None:
    """Hook `quota.changed`: push the team's new limits to Slurm (a refusal rolls back)."""
    try:
        quota_sync_team(team=quota.team, actor=actor, reason="quota changed in the portal")
    except SlurmError as error:
        raise _refused("the new limits", error) from error
