"""Quotas synced to Slurm account limits (GrpTRES, Fairshare) through a real sacctmgr."""

import pytest

from apps.audit.models import AuditEvent
from apps.integrations.slurm import services
from apps.teams.models import Quota
from apps.teams.services import quota_delete, quota_set
from tests.factories import PlatformAdminFactory, TeamFactory
from tests.integrations.slurm.conftest import slurm_out

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


def account_limits(cluster, account: str) -> tuple[str, str]:
    out = slurm_out(
        cluster,
        "sacctmgr",
        "-n",
        "-P",
        "show",
        "association",
        "where",
        f"account={account}",
        "format=account,user,grptres,fairshare",
    )
    for line in out.splitlines():
        name, user, grptres, fairshare = line.split("|")
        if name == account and not user:
            return grptres, fairshare
    raise AssertionError(f"no account {account} in Slurm: {out}")


def test_quota_edit_changes_grptres_and_fairshare(slurm):
    assert account_limits(slurm.cluster, "vision") == ("gres/gpu:h100=8", "4")
    admin = PlatformAdminFactory()
    quota_set(team=slurm.team, gpu_model=slurm.model, guaranteed=3, limit=6, actor=admin)
    assert account_limits(slurm.cluster, "vision") == ("gres/gpu:h100=6", "3")
    event = AuditEvent.objects.filter(action="slurm.limits_sync").latest("id")
    assert event.before == {"grptres": "gres/gpu:h100=8", "fairshare": "4", "parent": "root"}
    assert event.after == {"grptres": "gres/gpu:h100=6", "fairshare": "3", "parent": "root"}
    assert event.actor == admin


def test_any_model_quota_is_a_gres_gpu_limit_and_deleting_a_quota_lifts_its_limit(slurm):
    admin = PlatformAdminFactory()
    quota_set(team=slurm.team, gpu_model=None, guaranteed=0, limit=10, actor=admin)
    grptres, _ = account_limits(slurm.cluster, "vision")
    assert sorted(grptres.split(",")) == ["gres/gpu:h100=8", "gres/gpu=10"]
    quota_delete(quota=Quota.objects.get(team=slurm.team, gpu_model=slurm.model), actor=admin)
    assert account_limits(slurm.cluster, "vision") == ("gres/gpu=10", "1")


def test_new_team_gets_an_account_with_the_submit_user(slurm):
    team = TeamFactory(slug="speech")
    admin = PlatformAdminFactory()
    quota_set(team=team, gpu_model=slurm.model, guaranteed=2, limit=4, actor=admin)
    assert account_limits(slurm.cluster, "speech") == ("gres/gpu:h100=4", "2")
    users = slurm_out(
        slurm.cluster,
        "sacctmgr",
        "-n",
        "-P",
        "show",
        "assoc",
        "where",
        "account=speech",
        "format=user",
    ).split()
    assert slurm.cluster.user in users


def test_drift_made_in_slurm_is_reported_corrected_and_audited_once(slurm):
    slurm_out(
        slurm.cluster,
        "sacctmgr",
        "-i",
        "modify",
        "account",
        "where",
        "name=vision",
        "set",
        "GrpTRES=gres/gpu:h100=99",
        "Fairshare=50",
    )
    assert account_limits(slurm.cluster, "vision") == ("gres/gpu:h100=99", "50")
    report = services.quotas_sync()
    assert report["vision"]["before"] == {
        "grptres": "gres/gpu:h100=99",
        "fairshare": "50",
        "parent": "root",
    }
    assert account_limits(slurm.cluster, "vision") == ("gres/gpu:h100=8", "4")
    event = AuditEvent.objects.filter(action="slurm.limits_sync").latest("id")
    assert event.reason == "Slurm limits differed from quota"
    assert event.before["grptres"] == "gres/gpu:h100=99"
    # In sync now: a second run changes and records nothing.
    events = AuditEvent.objects.count()
    assert "vision" not in services.quotas_sync()
    assert AuditEvent.objects.count() == events


def test_quota_edit_that_slurm_refuses_is_rolled_back(slurm, settings):
    admin = PlatformAdminFactory()
    # Slurm does not know this gres type (not in AccountingStorageTRES): sacctmgr refuses.
    settings.SLURM_GPU_TYPES = {slurm.model.name: "nosuchgpu"}
    with pytest.raises(services.SlurmRefused):
        quota_set(team=slurm.team, gpu_model=slurm.model, guaranteed=1, limit=2, actor=admin)
    quota = Quota.objects.get(team=slurm.team, gpu_model=slurm.model)
    assert (quota.guaranteed, quota.limit) == (4, 8)
