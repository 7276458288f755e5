"""The exact optimum for small instances, used as an oracle in tests.

Search space: gradients cut into units of ``unit`` bytes; a message carries any number of
consecutive unsent units of any set of layers (so it covers per-layer, split and fused
messages alike), messages go over the serial network in any order, each as soon as the network
is free and its gradients exist, with no barrier. Every policy in dlsched produces a plan in
this space when block boundaries fall on unit boundaries and launches are no earlier than
readiness (a later launch or a barrier never helps), so the optimum here is <= every policy.
Depth-first search with a per-layer lower bound for pruning; exponential, so it refuses
instances above ``MAX_UNITS`` units in total.
"""

from __future__ import annotations

import itertools
import math

from dlsched.dataparallel.plan import Block, DPPlan, Message
from dlsched.dataparallel.problem import DPProblem
from dlsched.errors import ConfigError

MAX_UNITS = 8


class _Search:
    def __init__(self, problem: DPProblem, unit: int) -> None:
        self.problem, self.unit = problem, unit
        self.units = [math.ceil(b / unit) for b in problem.grad_bytes]
        self.best_time = math.inf
        self.best: list[tuple[tuple[int, ...], float]] = []

    def piece(self, layer: int, sent: int, count: int) -> int:
        """Bytes of ``count`` units of ``layer`` after ``sent`` units."""
        return min((sent + count) * self.unit, self.problem.grad_bytes[layer]) - sent * self.unit

    def finish(self, reduced: list[float]) -> float:
        clock = self.problem.backward_end
        for layer, forward in enumerate(self.problem.forward):
            clock = max(clock, reduced[layer]) + forward
        return clock

    def bound(self, sent: tuple[int, ...], tau: float, reduced: list[float]) -> float:
        optimistic = list(reduced)
        for layer, count in enumerate(self.units):
            if sent[layer] < count:
                rest = self.piece(layer, sent[layer], count - sent[layer])
                start = max(tau, self.problem.ready[layer])
                optimistic[layer] = start + self.problem.comm.lower(rest)
        return self.finish(optimistic)

    def run(self, sent: tuple[int, ...], tau: float, reduced: list[float],
            path: list[tuple[tuple[int, ...], float]]) -> None:
        if sent == tuple(self.units):
            time = self.finish(reduced)
            if time < self.best_time:
                self.best_time, self.best = time, list(path)
            return
        if self.bound(sent, tau, reduced) >= self.best_time:
            return
        ranges = [range(count - done + 1) for count, done in zip(self.units, sent, strict=True)]
        for take in itertools.product(*ranges):
            layers = [k for k, n in enumerate(take) if n]
            if not layers:
                continue
            start = max(tau, *(self.problem.ready[k] for k in layers))
            size = sum(self.piece(k, sent[k], take[k]) for k in layers)
            end = start + self.problem.comm.cost(size)
            after = list(reduced)
            for k in layers:
                after[k] = end
            path.append((take, start))
            self.run(tuple(s + n for s, n in zip(sent, take, strict=True)), end, after, path)
            path.pop()


def optimal_plan(problem: DPProblem, unit: int) -> DPPlan:
    """The fastest plan over the unit grid described above (exponential: small inputs only)."""
    search = _Search(problem, unit)
    if sum(search.units) > MAX_UNITS:
        raise ConfigError(f"unit: the exact search handles at most {MAX_UNITS} units in all "
                          f"(got {sum(search.units)}); use a larger unit or fewer layers")
    search.run(tuple(0 for _ in search.units), 0.0, [0.0] * problem.num_layers, [])
    sent = [0] * problem.num_layers
    msgs = []
    for take, start in search.best:
        blocks = []
        for layer, count in enumerate(take):
            if count:
                blocks.append(Block(layer, sent[layer] * unit, search.piece(layer, sent[layer],
                                                                              count)))
                sent[layer] += count
        msgs.append(Message(tuple(blocks), start))
    return DPPlan(tuple(msgs), barrier=False, policy="optimal")
