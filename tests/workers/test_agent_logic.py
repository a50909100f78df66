"""The agent's own logic: inventory with NVLink domains, batch numbering, bounded buffer."""

import json

import pytest

from workers.agent.agent import Agent
from workers.agent.backends import make_reader


class FlakyBroker:
    def __init__(self):
        self.up = True
        self.sent: list[tuple[str, dict]] = []

    def __call__(self, task_name, payload):
        if not self.up:
            raise ConnectionError("broker down")
        self.sent.append((task_name, json.loads(json.dumps(payload))))


@pytest.fixture
def broker():
    return FlakyBroker()


def _agent(broker, **options):
    reader = make_reader("simulated", "sim-node", gpu_count=4, **options)
    return Agent(
        hostname="sim-node", backend="simulated", reader=reader, send=broker, buffer_size=3
    )


def test_registration_carries_inventory_and_nvlink_domains(broker):
    _agent(broker).register()
    ((task, inventory),) = broker.sent
    assert task == "telemetry.register_node" and inventory["node"] == "sim-node"
    assert len(inventory["gpus"]) == 4
    assert {g["nvlink_domain"] for g in inventory["gpus"]} == {"nvl0"}
    assert not {
        g["nvlink_domain"] for g in _agent(FlakyBroker(), nvlink=False).inventory()["gpus"]
    } - {""}


def test_batches_have_increasing_sequence_numbers_and_all_gpus(broker):
    agent = _agent(broker)
    agent.poll()
    agent.poll()
    batches = [payload for task, payload in broker.sent if task == "telemetry.ingest"]
    assert batches[1]["seq"] == batches[0]["seq"] + 1
    assert {s["uuid"] for s in batches[0]["samples"]} == set(agent.reader.nvml.gpu_uuids)
    assert "processes" in batches[0] and "processes" not in batches[1]


def test_broker_outage_buffers_drops_oldest_and_flushes_in_order(broker):
    agent = _agent(broker)
    broker.up = False
    seqs = [agent.poll()["seq"] for _ in range(5)]
    assert len(agent.pending) == 3 and agent.dropped == 2
    broker.up = True
    agent.poll()
    delivered = [payload["seq"] for task, payload in broker.sent if task == "telemetry.ingest"]
    assert delivered == [*seqs[2:], seqs[-1] + 1]
    assert broker.sent[-1][1]["dropped_batches"] == 2
    assert not agent.pending
