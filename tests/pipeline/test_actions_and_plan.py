"""Actions round-trip through text; the plan validator marks the failing action."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pipeline_cases import one_gpu_stages

from dlsched.errors import ConfigError
from dlsched.pipeline import Action, PipelinePlan, PlanError, format_orders, parse_orders
from dlsched.pipeline.plans.plan import validate_plan
from dlsched.pipeline.plans.schedules import gpipe_orders, one_f_one_b_orders


@given(st.integers(0, 999), st.sampled_from("FBIW"), st.integers(0, 999))
def test_action_text_round_trips(stage: int, kind: str, microbatch: int) -> None:
    """str(Action) parses back to the same action."""
    action = Action(stage, kind, microbatch)
    assert Action.parse(str(action)) == action


def test_orders_text_round_trips() -> None:
    """A whole 1F1B schedule survives format_orders -> parse_orders."""
    orders = one_f_one_b_orders(one_gpu_stages(3), 3, 5)
    assert parse_orders(format_orders(orders)) == orders
    assert format_orders(orders).splitlines()[2] == "gpu2: 2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3 2F4 2B4"


@pytest.mark.parametrize("text", ["", "F0", "2X0", "2F", "-1F0", "2 F 0x"])
def test_bad_action_text(text: str) -> None:
    """Malformed actions are rejected with the expected form in the message."""
    with pytest.raises(ConfigError, match=re.escape("<stage><F|B|I|W><microbatch>")):
        Action.parse(text)


def test_validator_marks_backward_before_forward() -> None:
    """B before its F on the same GPU: the error names it and marks the cell in the grid."""
    stages = one_gpu_stages(2)
    orders = list(gpipe_orders(stages, 2, 2))
    orders[1] = (Action(1, "B", 0), Action(1, "F", 0), Action(1, "F", 1), Action(1, "B", 1))
    plan = PipelinePlan("bad", stages, tuple(orders), 2)
    with pytest.raises(PlanError) as error:
        validate_plan(plan, 2, 2)
    assert "gpu1 runs 1B0 before 1F0" in str(error.value)
    assert ">>1B0<<" in str(error.value)


@pytest.mark.parametrize(("change", "message"), [
    (lambda o: (o[0][:-1], o[1]), "missing actions: 0B1"),
    (lambda o: (o[0] + (Action(0, "F", 0),), o[1]), "appears twice"),
    (lambda o: (o[0] + (Action(1, "F", 0),), o[1]), "not this GPU's work"),
    (lambda o: (o[0] + (Action(0, "F", 7),), o[1]), "not part of this plan"),
])
def test_validator_rejects(change, message: str) -> None:
    """Missing, duplicated, misplaced and out-of-range actions are refused."""
    stages = one_gpu_stages(2)
    plan = PipelinePlan("bad", stages, change(gpipe_orders(stages, 2, 2)), 2)
    with pytest.raises(PlanError, match=message):
        validate_plan(plan, 2, 2)


def test_validator_checks_stage_cover() -> None:
    """Stages must cover the blocks in order."""
    stages = one_gpu_stages(2)
    plan = PipelinePlan("bad", stages, gpipe_orders(stages, 2, 2), 2)
    with pytest.raises(PlanError, match="stages end at block 1, the model has 3"):
        validate_plan(plan, 3, 2)
