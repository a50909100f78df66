import pytest

from apps.audit.models import AuditEvent
from apps.teams.models import Quota
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

URL = "/api/v1/quotas/"


def test_platform_admin_creates_then_changes_quota_audited(platform_admin, team, fleet):
    api = client_for(platform_admin)
    body = {"team": "vision", "gpu_model": "H100-SXM-80GB", "guaranteed": 4, "limit": 8}
    created = api.post(URL, body, format="json")
    assert created.status_code == 201, created.json()
    # POSTing the same team and model again replaces it (upsert), not a duplicate
    again = api.post(URL, {**body, "limit": 10}, format="json")
    assert again.status_code == 201 and Quota.objects.count() == 1
    patched = api.patch(f"{URL}{created.json()['id']}/", {"guaranteed": 6}, format="json")
    assert patched.json()["guaranteed"] == 6 and patched.json()["limit"] == 10
    actions = list(AuditEvent.objects.order_by("id").values_list("action", "before", "after"))
    assert actions[0] == (
        "quota.create",
        None,
        {"gpu_model": "H100-SXM-80GB", "guaranteed": 4, "limit": 8},
    )
    assert actions[2][1]["guaranteed"] == 4 and actions[2][2]["guaranteed"] == 6


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"guaranteed": 5, "limit": 4}, "limit"),
        ({"guaranteed": -1, "limit": 4}, "guaranteed"),
        ({"guaranteed": 1, "limit": -4}, "limit"),
        ({"guaranteed": "lots", "limit": 4}, "guaranteed"),
        ({"guaranteed": 1, "limit": 10**15}, "limit"),
        ({"gpu_model": "Z9000", "guaranteed": 1, "limit": 2}, "gpu_model"),
    ],
)
def test_invalid_quota_is_400_and_nothing_is_written(platform_admin, team, fleet, body, field):
    payload = {"team": "vision", "gpu_model": "H100-SXM-80GB", **body}
    response = client_for(platform_admin).post(URL, payload, format="json")
    assert response.status_code == 400
    assert field in response.json()["detail"]
    assert not Quota.objects.exists() and not AuditEvent.objects.exists()


def test_members_read_own_team_quotas_only_and_cannot_write(
    member, outsider, team, other_team, fleet
):
    from apps.fleet.models import GpuModel

    h100 = GpuModel.objects.get(name="H100-SXM-80GB")
    Quota.objects.create(team=team, gpu_model=h100, guaranteed=1, limit=2)
    theirs = Quota.objects.create(team=other_team, gpu_model=h100, guaranteed=3, limit=4)
    api = client_for(member)
    assert [q["team"] for q in api.get(URL).json()["results"]] == ["vision"]
    assert api.get(f"{URL}{theirs.pk}/").status_code == 404
    refused = api.post(URL, {"team": "vision", "guaranteed": 9, "limit": 9}, format="json")
    assert refused.status_code == 403
    assert Quota.objects.get(team=team).limit == 2


def test_finance_reads_all_quotas(finance_user, team, other_team, fleet):
    Quota.objects.create(team=team, gpu_model=None, guaranteed=1, limit=2)
    Quota.objects.create(team=other_team, gpu_model=None, guaranteed=1, limit=2)
    assert client_for(finance_user).get(URL).json()["count"] == 2
    assert client_for(finance_user).delete(f"{URL}{Quota.objects.first().pk}/").status_code == 403
