"""The scheduler knows capacity that is powering up: "why pending" names the node and about how
long, and the estimated start includes its resume time."""

from apps.jobs.scheduler import schedule
from apps.jobs.scheduler.state import ClusterState, PendingReason, ResumingNode
from tests.jobs.test_scheduler import H100, NOW, fleet, job, pending, placed, quotas, running


def test_a_job_waiting_for_a_node_powering_up_says_so_with_its_estimate():
    busy = running(90, "nlp", range(8), started=NOW - 60, runtime=7200.0)
    state = ClusterState(
        NOW,
        fleet(1, 8),
        [job(1, count=4)],
        running=[busy],
        quotas=quotas(),
        resuming=[ResumingNode("gpu-07", H100, 8, NOW + 230)],
    )
    decision = schedule(state)
    assert placed(decision) == {}
    waiting = pending(decision)[1]
    assert waiting.reason == PendingReason.POWERING_UP
    assert waiting.message == "Node gpu-07 is powering up (about 4 min)."
    # Sooner than the running job's end (2 h): the resumed node.
    assert waiting.estimated_start == NOW + 230


def test_when_the_whole_model_is_powered_down_the_resuming_nodes_are_named():
    state = ClusterState(
        NOW,
        [],
        [job(1, count=12, same_node=False)],
        quotas=quotas(),
        resuming=[
            ResumingNode("gpu-07", H100, 8, NOW + 100),
            ResumingNode("gpu-08", H100, 8, NOW + 400),
        ],
    )
    waiting = pending(schedule(state))[1]
    assert waiting.reason == PendingReason.POWERING_UP
    assert waiting.message == "Nodes gpu-07, gpu-08 are powering up (about 7 min)."
    assert waiting.estimated_start == NOW + 400


def test_resuming_capacity_too_small_for_the_job_leaves_the_capacity_reason():
    state = ClusterState(
        NOW,
        fleet(1, 4),
        [job(1, count=8, same_node=True)],
        quotas=quotas(),
        resuming=[ResumingNode("gpu-07", H100, 4, NOW + 100)],
    )
    waiting = pending(schedule(state))[1]
    assert waiting.reason == PendingReason.NO_CAPACITY
    assert waiting.message == f"No node has 8 free {H100} GPUs."


def test_without_resuming_nodes_nothing_changes():
    busy = running(90, "nlp", range(8), started=NOW - 60, runtime=7200.0)
    state = ClusterState(NOW, fleet(1, 8), [job(1, count=4)], running=[busy], quotas=quotas())
    waiting = pending(schedule(state))[1]
    assert waiting.reason == PendingReason.NO_CAPACITY
    assert waiting.estimated_start == NOW - 60 + 7200.0
