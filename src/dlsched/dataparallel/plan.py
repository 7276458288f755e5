"""Data-parallel communication plans: an ordered list of messages, each a list of blocks.

A block is ``(layer, offset, length)`` in bytes of that layer's gradient; a message is one
all-reduce of its blocks (fusion when they come from several layers) started no earlier than
its ``launch`` time (seconds after backward starts). A plan is valid when every byte of every
gradient is sent exactly once and no message launches before all of its gradients exist.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from dlsched.dataparallel.problem import DPProblem
from dlsched.errors import PlanError


@dataclass(frozen=True, slots=True)
class Block:
    """``length`` bytes of layer ``layer``'s gradient starting at byte ``offset``."""

    layer: int
    offset: int
    length: int

    def __str__(self) -> str:
        return f"L{self.layer}[{self.offset}:{self.offset + self.length}]"


@dataclass(frozen=True)
class Message:
    """One all-reduce of ``blocks``, launched at ``launch`` seconds or later."""

    blocks: tuple[Block, ...]
    launch: float

    @property
    def num_bytes(self) -> int:
        """Bytes all-reduced by this message."""
        return sum(block.length for block in self.blocks)


@dataclass(frozen=True)
class DPPlan:
    """Messages in network order; ``barrier``: the next forward waits for all of them;
    ``in_flight``: how many of them the policy lets run at once (admitted in order);
    ``credit``: bytes the running messages may hold — the next one starts only while they hold
    less (ByteScheduler's credit; 1 byte: one at a time; inf: only ``in_flight`` limits);
    ``settings``: the knob values the plan was made with, for tables (e.g. "bucket 25 MiB")."""

    messages: tuple[Message, ...]
    barrier: bool
    policy: str
    in_flight: int = 1
    settings: str = ""
    credit: float = math.inf

    def __str__(self) -> str:
        return "\n".join(f"m{i} @{m.launch * 1e3:.3f}ms: " + " ".join(map(str, m.blocks))
                         for i, m in enumerate(self.messages))


def message(problem: DPProblem, blocks: list[Block], not_before: float = 0.0) -> Message:
    """A message launched as soon as its gradients are ready (and not before ``not_before``)."""
    return Message(tuple(blocks), max(not_before, *(problem.ready[b.layer] for b in blocks)))


def as_issued(problem: DPProblem, plan: DPPlan) -> DPPlan:
    """``plan`` with each message launched the moment its gradients are ready in ``problem``
    (seconds after backward starts), as the runtime executor issues it: in plan order once
    every block's gradient exists, with no policy wait beyond that (e.g. Horovod's cycle)."""
    return replace(plan, messages=tuple(message(problem, list(m.blocks))
                                        for m in plan.messages))


def whole_layer(problem: DPProblem, layer: int) -> Block:
    """A block carrying all of one layer's gradient."""
    return Block(layer, 0, problem.grad_bytes[layer])


def _coverage_problems(problem: DPProblem, plan: DPPlan) -> dict[int, str]:
    pieces: dict[int, list[tuple[int, int, int]]] = {}
    problems: dict[int, str] = {}
    for index, msg in enumerate(plan.messages):
        if not msg.blocks:
            problems[index] = "empty message"
        for block in msg.blocks:
            if not 0 <= block.layer < problem.num_layers or block.length <= 0:
                problems[index] = f"block {block} is outside the model or empty"
                continue
            pieces.setdefault(block.layer, []).append((block.offset, block.length, index))
        late = [b.layer for b in msg.blocks if 0 <= b.layer < problem.num_layers
                and msg.launch < problem.ready[b.layer] - 1e-12]
        if late:
            problems[index] = f"launches before layer {late[0]}'s gradient exists"
    for layer in range(problem.num_layers):
        position = 0
        for offset, length, index in sorted(pieces.get(layer, [])):
            if offset != position:
                what = "lost" if offset > position else "duplicated"
                problems.setdefault(index, f"bytes {min(offset, position)}..{max(offset, position)}"
                                           f" of layer {layer} are {what}")
            position = max(position, offset + length)
        if position != problem.grad_bytes[layer] and problem.grad_bytes[layer] > 0:
            last = max((p[2] for p in pieces.get(layer, [])), default=len(plan.messages))
            what = "lost" if position < problem.grad_bytes[layer] else "sent past its end"
            problems.setdefault(last, f"bytes {position}..{problem.grad_bytes[layer]} of layer "
                                      f"{layer} are {what}")
    return problems


def validate_plan(problem: DPProblem, plan: DPPlan) -> None:
    """Raise PlanError naming and marking each bad message (lost, duplicated, early bytes)."""
    if not 1 <= plan.in_flight <= problem.in_flight:
        raise PlanError(f"invalid data-parallel plan ({plan.policy}): {plan.in_flight} messages "
                        f"in flight, the network carries 1 to {problem.in_flight}")
    if not plan.credit > 0:
        raise PlanError(f"invalid data-parallel plan ({plan.policy}): credit {plan.credit!r} "
                        "bytes, must be > 0")
    problems = _coverage_problems(problem, plan)
    if problems:
        lines = [("-> " if i in problems else "   ") + f"m{i} @{m.launch * 1e3:.3f}ms: "
                 + " ".join(map(str, m.blocks)) + (f"   <- {problems[i]}" if i in problems else "")
                 for i, m in enumerate(plan.messages)]
        if len(plan.messages) in problems:
            lines.append(f"-> (end of plan)   <- {problems[len(plan.messages)]}")
        raise PlanError(f"invalid data-parallel plan ({plan.policy}):\n" + "\n".join(lines))
