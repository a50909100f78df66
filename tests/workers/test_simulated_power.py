"""The simulated node obeys its power switch: switched off it sends nothing and says it is off;
switched back on it registers again, reports again and says it is on."""

from workers.agent.agent import Agent
from workers.agent.backends import make_reader
from workers.agent.simulated_power import SimulatedPower
from workers.protocol import INGEST_TASK, REGISTER_NODE_TASK, power_switch_paths


def test_the_agent_follows_its_switch(tmp_path):
    sent: list[str] = []
    agent = Agent(
        hostname="gpu-07",
        backend="simulated",
        reader=make_reader("simulated", "gpu-07", gpu_count=2, profile="idle"),
        send=lambda task, payload: sent.append(task),
        power=SimulatedPower(tmp_path, "gpu-07"),
    )
    switch, state = power_switch_paths(tmp_path, "gpu-07")
    agent.poll()
    assert sent == [INGEST_TASK] and state.read_text() == "on"
    switch.write_text("off")
    assert agent.poll() == {"powered_off": True}
    assert agent.poll() == {"powered_off": True}
    assert sent == [INGEST_TASK] and state.read_text() == "off"
    switch.write_text("on")
    agent.poll()
    assert sent == [INGEST_TASK, REGISTER_NODE_TASK, INGEST_TASK]
    assert state.read_text() == "on"
