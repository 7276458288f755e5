"""Re-ranking candidate plans by time to train, energy or cost (goodput.objective)."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.goodput.objective import check_objective, choose, reason

ROWS = [
    {"layout": "fast", "iteration_s": 5.0, "iteration_mean_s": 5.2, "goodput": 0.90,
     "ttt_days": 80.0, "energy_mwh": 30000.0, "cost": 9.0e7},
    {"layout": "robust", "iteration_s": 5.1, "iteration_mean_s": 5.25, "goodput": 0.93,
     "ttt_days": 78.0, "energy_mwh": 29500.0, "cost": 8.8e7},
    {"layout": "frugal", "iteration_s": 5.3, "iteration_mean_s": 5.4, "goodput": 0.93,
     "ttt_days": 80.5, "energy_mwh": 29000.0, "cost": 9.1e7},
]


@pytest.mark.parametrize(("objective", "expected"),
                         [("expected", 0), ("time-to-train", 1), ("energy", 2), ("cost", 1)])
def test_each_objective_minimises_its_column(objective: str, expected: int) -> None:
    assert choose(ROWS, objective) == expected


def test_reason_names_both_plans_and_what_differs() -> None:
    text = reason(ROWS[1], ROWS[0], "time-to-train")
    assert "chose robust over the iteration-best fast" in text
    assert "goodput 93.00% vs 90.00%" in text and "time to train 78.00 days vs 80.00 days" in text


def test_bad_objectives_are_refused_with_the_field() -> None:
    """Field ``objective`` (``dlsched plan`` says ``--objective``); the reason names what the
    objective needs."""
    with pytest.raises(ConfigError, match=r"^objective: 'speed' is not accepted") as refused:
        check_objective("speed", True)
    assert refused.value.field == "objective"
    with pytest.raises(ConfigError, match=r"^objective: energy needs --tokens"):
        check_objective("energy", False)
    with pytest.raises(ConfigError, match=r"^objective: cost needs --gpu-hour-price"):
        choose([{**ROWS[0], "cost": None}], "cost")
