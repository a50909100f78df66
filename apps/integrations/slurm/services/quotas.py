"""Team quotas mirrored as Slurm association limits (GrpTRES), and the organisation tree as
parent accounts.

Each team is an account; each organisation unit below the root is an account too
(`SLURM_UNIT_ACCOUNT_PREFIX` + its slug, so it cannot meet a team's name), whose GrpTRES caps
all the teams below it together as the unit's limit does in the portal. A team's or unit's
account sits under its unit's; the organisation's root unit is Slurm's own `root`, so a
portal without departments keeps its flat list of accounts."""

import getpass

from django.conf import settings
from django.db import transaction

from apps.audit.services import audit_record
from apps.integrations.slurm.client import (
    SlurmError,
    parse_tres,
)
from apps.integrations.slurm.services.common import _refused, client, gpu_type
from apps.teams.models import OrgUnit, Quota, Team, UnitQuota


def _limits(rows) -> tuple[dict[str, str], int]:
    """Quota rows as Slurm limits: GrpTRES per gres type (`gres/gpu:<type>`; the any-model
    row as `gres/gpu`) from the limits, and a Fairshare from the guarantees."""
    tres: dict[str, str] = {}
    guaranteed = 0
    for row in rows:
        key = f"gres/gpu:{gpu_type(row.gpu_model)}" if row.gpu_model_id else "gres/gpu"
        tres[key] = str(row.limit)
        guaranteed += row.guaranteed
    return tres, max(guaranteed, 1)


def desired_limits(team: Team) -> tuple[dict[str, str], int]:
    """The team's quota as Slurm limits."""
    return _limits(Quota.objects.filter(team=team).select_related("gpu_model"))


def unit_account(unit: OrgUnit) -> str:
    """The unit's Slurm account: Slurm's `root` for the organisation's root unit."""
    if unit.parent_id is None:
        return "root"
    return f"{settings.SLURM_UNIT_ACCOUNT_PREFIX}{unit.slug}"


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


def _account_sync(
    *, account: str, description: str, parent: str, limits, target, actor, reason: str, user: bool
) -> dict | None:
    """Make one Slurm account match: create it under `parent` (with the submit user's
    association when `user`), move it under `parent` if it sits elsewhere, set GrpTRES and
    Fairshare where they drifted. Idempotent; each correction is audited with what Slurm had
    before. Returns the change, or None."""
    slurm = client()
    cluster = [f"cluster={settings.SLURM_CLUSTER}"] if settings.SLURM_CLUSTER else []
    current = slurm.account_limits(account)
    created = current is None
    if created:
        slurm.sacctmgr(
            "add", "account", account, f"Description={description}", "Organization=portal",
            f"Parent={parent}", *cluster,
        )  # fmt: skip
        current = {"grptres": "", "fairshare": "1", "parent": parent}
    if user:
        submit_user = _submit_user()
        if submit_user not in slurm.account_users(account):
            slurm.sacctmgr("add", "user", submit_user, f"Account={account}", *cluster)
    have = {k: v for k, v in parse_tres(current["grptres"]).items() if k.startswith("gres/gpu")}
    want, fairshare = limits
    changes = dict(want.items() - have.items())
    changes.update({key: "-1" for key in have if key not in want})
    fairshare_changed = current["fairshare"] != str(fairshare)
    moved = current["parent"] != parent
    if not changes and not fairshare_changed and not moved and not created:
        return None
    settings_args = []
    if changes:
        settings_args.append("GrpTRES=" + ",".join(f"{k}={v}" for k, v in sorted(changes.items())))
    if fairshare_changed:
        settings_args.append(f"Fairshare={fairshare}")
    if moved:
        settings_args.append(f"Parent={parent}")
    if settings_args:
        slurm.sacctmgr("modify", "account", "where", f"name={account}", *cluster, "set",
                       *settings_args)  # fmt: skip
    after = {
        "grptres": ",".join(f"{k}={v}" for k, v in sorted(want.items())),
        "fairshare": str(fairshare),
        "parent": parent,
    }
    change = {"before": dict(current), "after": after}
    audit_record(
        actor=actor,
        action="slurm.account_create" if created else "slurm.limits_sync",
        target=target,
        before=None if created else change["before"],
        after=change["after"],
        reason=reason or ("account created" if created else "Slurm limits differed from quota"),
    )
    return change


def quota_sync_team(*, team: Team, actor=None, reason: str = "") -> dict | None:
    """Make the team's Slurm account match its quotas and its place in the organisation
    tree: create the account (and the submit user's association) under its unit's account if
    missing, move it there, set GrpTRES and Fairshare where they drifted. Idempotent; audited.
    Returns the change, or None."""
    unit = OrgUnit.objects.get(teams=team)
    unit_sync(unit=unit, actor=actor, reason=reason)
    return _account_sync(
        account=team.slug,
        description=team.name or team.slug,
        parent=unit_account(unit),
        limits=desired_limits(team),
        target=team,
        actor=actor,
        reason=reason,
        user=True,
    )


def unit_sync(*, unit: OrgUnit, actor=None, reason: str = "") -> dict | None:
    """Make a unit's Slurm account (none for the root unit) match its quotas and its parent,
    its parent's first (an account is created under an existing one). Audited."""
    if unit.parent_id is None:
        return None
    unit_sync(unit=unit.parent, actor=actor, reason=reason)
    return _account_sync(
        account=unit_account(unit),
        description=unit.name,
        parent=unit_account(unit.parent),
        limits=_limits(UnitQuota.objects.filter(unit=unit).select_related("gpu_model")),
        target=unit,
        actor=actor,
        reason=reason,
        user=False,
    )


def quotas_sync(*, actor=None) -> dict[str, dict]:
    """Sync every unit's and active team's account (the beat task; also corrects edits made in
    Slurm): units first, so each account's parent exists."""
    report = {}
    for unit in OrgUnit.objects.exclude(parent=None).select_related("parent").order_by("pk"):
        with transaction.atomic():
            change = unit_sync(unit=unit, actor=actor)
        if change:
            report[unit_account(unit)] = change
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


def on_unit_changed(*, unit: OrgUnit, actor=None, **_) -> None:
    """Hook `unit.changed` (created, moved, quota set): mirror it; a refusal rolls back."""
    try:
        unit_sync(unit=unit, actor=actor, reason="unit changed in the portal")
    except SlurmError as error:
        raise _refused("the unit's account", error) from error


def on_team_moved(*, team: Team, actor=None, **_) -> None:
    """Hook `team.moved`: the team's account follows it under its new unit's."""
    try:
        quota_sync_team(team=team, actor=actor, reason="team moved in the portal")
    except SlurmError as error:
        raise _refused("the team's new place", error) from error
