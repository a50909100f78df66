"""The organisation tree mirrored into a real Slurm as parent accounts: a unit is an account
(with GrpTRES from its limits) under its parent's, a team's account sits under its unit's, and
moves and drift made in Slurm are followed."""

import pytest

from apps.audit.models import AuditEvent
from apps.integrations.slurm import services
from apps.teams.models import ROOT_UNIT_SLUG, OrgUnit
from apps.teams.services import team_move, unit_create, unit_move, unit_quota_set
from tests.factories import PlatformAdminFactory
from tests.integrations.slurm.conftest import slurm_out

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


def account(cluster, name: str) -> tuple[str, str, str] | None:
    """(parent, GrpTRES, Fairshare) of an account's own association, None if Slurm lacks it."""
    out = slurm_out(
        cluster, "sacctmgr", "-n", "-P", "show", "association", "where", f"account={name}",
        "format=account,user,parentname,grptres,fairshare",
    )  # fmt: skip
    for line in out.splitlines():
        acct, user, parent, grptres, fairshare = line.split("|")
        if acct == name and not user:
            return parent, grptres, fairshare
    return None


def test_units_become_parent_accounts_and_teams_follow_their_unit(slurm):
    admin = PlatformAdminFactory()
    root = OrgUnit.objects.get(slug=ROOT_UNIT_SLUG)
    assert account(slurm.cluster, "vision")[0] == "root"  # the root unit is Slurm's root
    research = unit_create(slug="research", name="Research", parent=root, actor=admin)
    assert account(slurm.cluster, "unit-research") == ("root", "", "1")
    unit_quota_set(unit=research, gpu_model=slurm.model, guaranteed=6, limit=8, actor=admin)
    assert account(slurm.cluster, "unit-research") == ("root", "gres/gpu:h100=8", "6")

    team_move(team=slurm.team, unit=research, actor=admin)
    assert account(slurm.cluster, "vision") == ("unit-research", "gres/gpu:h100=8", "4")

    lab = unit_create(slug="lab", name="Lab", parent=root, actor=admin)
    unit_move(unit=research, parent=lab, actor=admin)
    assert account(slurm.cluster, "unit-research")[0] == "unit-lab"
    assert account(slurm.cluster, "vision")[0] == "unit-research"
    assert AuditEvent.objects.filter(action="slurm.account_create", object_repr="lab").exists()


def test_an_account_moved_in_slurm_is_put_back_by_the_sync(slurm):
    admin = PlatformAdminFactory()
    root = OrgUnit.objects.get(slug=ROOT_UNIT_SLUG)
    research = unit_create(slug="research", name="Research", parent=root, actor=admin)
    team_move(team=slurm.team, unit=research, actor=admin)
    slurm_out(
        slurm.cluster, "sacctmgr", "-i", "modify", "account", "where", "name=vision", "set",
        "parent=root",
    )  # fmt: skip
    assert account(slurm.cluster, "vision")[0] == "root"
    report = services.quotas_sync()
    assert report["vision"]["before"]["parent"] == "root"
    assert account(slurm.cluster, "vision")[0] == "unit-research"
    assert services.quotas_sync() == {}  # nothing left to correct
