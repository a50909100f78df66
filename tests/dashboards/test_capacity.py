"""The capacity chart: GPUs powered on against demand (GPUs running plus GPUs queued)."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.dashboards.selectors import capacity, parse_filters
from apps.fleet.choices import PowerState
from apps.fleet.models import Gpu, Node, NodePowerEvent
from apps.jobs.models import Job, JobAllocation
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def window(fleet, team, member):
    """Four hours on the two 8-GPU H100 nodes: h100-b powered down from 1 h to 3 h; a 4-GPU job
    runs 0-2 h; an 8-GPU job submitted at 1 h waits until 3 h, then runs."""
    t0 = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=6)
    node = Node.objects.get(hostname="h100-b")
    for hours, before, after in ((1, PowerState.ON, PowerState.OFF),
                                 (3, PowerState.OFF, PowerState.ON)):  # fmt: skip
        NodePowerEvent.objects.create(node=node, from_state=before, to_state=after,
                                      at=t0 + timedelta(hours=hours))  # fmt: skip
    gpus = list(Gpu.objects.filter(node__hostname="h100-a").order_by("index"))
    small = JobFactory(team=team, submitted_by=member, gpu_count=4, status="succeeded")
    big = JobFactory(team=team, submitted_by=member, gpu_count=8, status="running")
    Job.objects.filter(pk=small.pk).update(submitted_at=t0, started_at=t0)
    Job.objects.filter(pk=big.pk).update(submitted_at=t0 + timedelta(hours=1),
                                         started_at=t0 + timedelta(hours=3))  # fmt: skip
    for gpu in gpus[:4]:
        JobAllocation.objects.create(job=small, gpu=gpu, start=t0, end=t0 + timedelta(hours=2))
    for gpu in gpus:
        JobAllocation.objects.create(job=big, gpu=gpu, start=t0 + timedelta(hours=3))
    return t0


def _filters(user, t0):
    end = t0 + timedelta(hours=4)
    params = {"range": "custom", "start": t0.isoformat(), "end": end.isoformat(),
              "gpu_model": "H100-SXM-80GB"}  # fmt: skip
    return parse_filters(params, user)


def test_powered_on_gpus_against_running_and_queued(window, member):
    data = capacity(_filters(member, window))
    at = {t: k for k, t in enumerate(data["times"])}

    def sample(hours):
        moment = min(at, key=lambda t: abs(t - (window + timedelta(hours=hours))))
        k = at[moment]
        return data["powered_on"][k], data["running"][k], data["queued"][k]

    assert sample(0.5) == (16, 4, 0)
    assert sample(1.5) == (8, 4, 8)  # h100-b off; the big job waits
    assert sample(2.5) == (8, 0, 8)
    assert sample(3.5) == (16, 8, 0)


def test_the_occupancy_page_draws_the_capacity_chart(window, member, client):
    client.force_login(member)
    start = window.strftime("%Y-%m-%dT%H:%M")
    page = client.get(f"/dashboards/occupancy/?range=custom&start={start}").content.decode()
    assert 'data-figure="capacity"' in page
    figures = json.loads(page.split('id="dashboard-figures" type="application/json">')[1]
                         .split("</script>")[0])  # fmt: skip
    names = [trace["name"] for trace in figures["capacity"]["data"]]
    assert names == ["running", "queued", "powered on"]
    assert max(figures["capacity"]["data"][2]["y"]) == 20  # both H100 nodes and the L40S node
    assert min(figures["capacity"]["data"][2]["y"]) == 12  # h100-b off
