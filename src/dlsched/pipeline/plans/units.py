"""Units of a fixed order: consecutive actions of one GPU that start and end together
(``PipelinePlan.joined``), e.g. DualPipe's overlapped forward and backward pair, read the same
way by the simulator and the deadlock check."""

from __future__ import annotations

from collections.abc import Callable

from dlsched.pipeline.plans.actions import Action


def next_unit(order: tuple[Action, ...], start: int, joined: frozenset[int],
              is_ready: Callable[[Action], bool]) -> tuple[Action, ...]:
    """The unit at position ``start`` of ``order`` (the action there and each next one joined
    to it) when it can start: every action's input is there (``is_ready``), a W's also when
    its I runs in the same unit; otherwise, and past the order's end, ``()``."""
    end = start + 1
    while end - 1 in joined:
        end += 1
    unit = order[start:end]
    for action in unit:
        if not is_ready(action) and not (action.kind == "W" and Action(
                action.stage, "I", action.microbatch) in unit):
            return ()
    return unit
