"""The plan validator, the comm models and bad inputs."""

import pytest

from dlsched.collectives import run_collective
from dlsched.dataparallel import (
    PRESETS,
    AlphaBeta,
    Block,
    DPPlan,
    DPProblem,
    Message,
    PlanError,
    TopologyPriced,
    parse_network,
    ring_allreduce,
    simulate_plan,
    validate_plan,
)
from dlsched.dataparallel.plan import as_issued
from dlsched.errors import ConfigError
from dlsched.hardware import load_topology

PROBLEM = DPProblem((1e-3, 1e-3), (2e-3, 2e-3), (100, 50), AlphaBeta(1e-3, 1e-9))


def _plan(*messages: tuple[tuple[Block, ...], float]) -> DPPlan:
    return DPPlan(tuple(Message(blocks, launch) for blocks, launch in messages), False, "test")


def test_valid_split_plan():
    """Layer 0 in two blocks, layer 1 whole, launched once ready (2 ms and 4 ms)."""
    validate_plan(PROBLEM, _plan(((Block(1, 0, 50),), 2e-3),
                                 ((Block(0, 0, 60), Block(0, 60, 40)), 4e-3)))


def test_as_issued_launches_each_message_when_its_gradients_are_ready():
    """A plan that holds its messages back (layer 1 until 3 ms, layer 0 until 4.5 ms, as a
    Horovod cycle would) is executed as soon as the gradients exist (2 ms and 4 ms), and
    simulated so by hand: m0 ends at 2 + 1 + 50e-6 ms, m1 at 4 + 1 + 100e-6 ms, then the
    forwards of layer 0 and 1 (1 ms each): 7.0001 ms, against 7.5001 ms held back."""
    held = _plan(((Block(1, 0, 50),), 3e-3), ((Block(0, 0, 100),), 4.5e-3))
    issued = as_issued(PROBLEM, held)
    assert [m.launch for m in issued.messages] == [2e-3, 4e-3]
    assert [m.blocks for m in issued.messages] == [m.blocks for m in held.messages]
    assert simulate_plan(PROBLEM, issued).time_s == pytest.approx(7.0001e-3, rel=1e-12)
    assert simulate_plan(PROBLEM, held).time_s == pytest.approx(7.5001e-3, rel=1e-12)


@pytest.mark.parametrize(("messages", "needle"), [
    ([((Block(1, 0, 50),), 2e-3), ((Block(0, 0, 60),), 4e-3)], "lost"),
    ([((Block(1, 0, 50),), 2e-3), ((Block(0, 0, 60), Block(0, 50, 50)), 4e-3)], "duplicated"),
    ([((Block(1, 0, 50),), 1e-3), ((Block(0, 0, 100),), 4e-3)], "before layer 1"),
    ([((Block(1, 0, 50),), 2e-3), ((Block(0, 0, 100),), 4e-3), ((Block(1, 0, 50),), 4e-3)],
     "duplicated"),
])
def test_validator_catches_bad_plans(messages, needle):
    """Lost, duplicated and too-early bytes are named, and the message is marked."""
    with pytest.raises(PlanError, match=needle) as error:
        validate_plan(PROBLEM, _plan(*messages))
    assert "-> m" in str(error.value)


def test_reference_constants_are_per_byte():
    """The US-Byte 8-worker constants: 1318.6 us + 2.406e-10 s per fp32 element."""
    model = PRESETS["usbyte-8"]
    assert model.cost(4 * 10**6) == pytest.approx(1318.6e-6 + 2.406e-10 * 10**6)
    assert PRESETS["10gbe-8"].cost(1000) == pytest.approx(0.523e-3 + 8.57e-10 * 1000)


def test_ring_formula():
    """Ring over N: 2(N-1) latency steps and 2(N-1)/N of the bytes per link."""
    model = ring_allreduce(4, 1e9, 1e-6)
    assert model.cost(1e9) == pytest.approx(6e-6 + 1.5)


def test_topology_pricing_uses_the_collective_simulator():
    """A message priced on a topology costs what run_collective says; the bound is below."""
    net = load_topology("3D-SW_SW_SW_hetero")
    model = TopologyPriced(net)
    expected = run_collective(net, "all-reduce", 10**8, 16, "themis", "scf").time_s
    assert model.cost(10**8) == pytest.approx(expected)
    assert model.lower(10**8) <= model.cost(10**8)


@pytest.mark.parametrize(("text", "needle"), [
    ("fast", "accepted"), ("ring:lots,1us", "bandwidth"), ("1ms,abc", "network"),
])
def test_bad_network_strings(text, needle):
    """Bad --network values name what is accepted."""
    with pytest.raises(ValueError, match=needle):
        parse_network(text, 8)


def test_parse_network_forms():
    """Presets, alpha,beta and ring forms."""
    assert parse_network("usbyte-4", 4) is PRESETS["usbyte-4"]
    assert parse_network("2ms,1e-10", 4).alpha == pytest.approx(2e-3)
    assert parse_network("ring:100Gb/s,5us", 8).beta == pytest.approx(2 * 7 / 8 / 12.5e9)


def test_negative_times_are_refused():
    """Negative backward time names the field and layer."""
    with pytest.raises(ConfigError, match=r"backward\[1\]"):
        DPProblem((1e-3, 1e-3), (1e-3, -1e-3), (10, 10), AlphaBeta(1e-3, 1e-9))
