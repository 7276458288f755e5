"""Seconds of each pipeline action on each GPU, as the simulator runs them, and each GPU's
total compute (what an early ``Late`` bounds the iteration with)."""

from __future__ import annotations

from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.plans.actions import Action
from dlsched.pipeline.plans.plan import Stage, host_transfers


class ActionTimes:
    """Action seconds of ``stages`` on ``problem``'s GPUs (the chain under its recomputation
    mode and the instance's tensor-parallel degree, ``PipelineProblem.action_flops``)."""

    def __init__(self, problem: PipelineProblem, stages: tuple[Stage, ...]) -> None:
        self.stages, self.devices = stages, problem.graph.devices
        self.flops = [problem.action_flops(stage) for stage in stages]
        self.shares = problem.chain.grad_shares
        self.known: dict[tuple[int, str, int], float] = {}
        self.transfer_costs = [d.transfer_overhead for d in self.devices]
        self.hidden = [problem.chain.overlap_seconds[st.first:st.last].sum(axis=0)
                       for st in stages]

    def compute(self, s: int, kind: str, device: int) -> float:
        """Seconds of an action of ``kind`` on stage ``s`` on ``device``: its compute and the
        GPU's overhead (found once per stage, kind and GPU)."""
        key = (s, kind, device)
        seconds = self.known.get(key)
        if seconds is None:
            forward, backward = self.flops[s]
            inputs, weights = self.shares
            work = {"F": forward, "B": backward, "I": backward * inputs,
                    "W": backward * weights}[kind]
            gpu = self.devices[device]
            seconds = self.known[key] = work / gpu.flops + gpu.overhead
        return seconds

    def duration(self, action: Action, device: int) -> float:
        """Seconds of ``action`` on ``device``: its compute (``compute``) and the GPU's
        ``transfer_overhead`` per activation or gradient the action receives from or sends
        to another GPU (``host_transfers``)."""
        seconds = self.compute(action.stage, action.kind, device)
        if self.transfer_costs[device]:
            return seconds + self.transfer_costs[device] * host_transfers(self.stages, action,
                                                                          device)
        return seconds

    def overlapped(self, unit: tuple[Action, ...], total: float) -> float:
        """Seconds of ``unit`` (``PipelinePlan.joined``) whose actions take ``total`` one after
        another: a pair of a forward and a backward (B or I) hides each chunk's own
        communication (``Chain.overlap_seconds``) behind the other's compute, ``max(total -
        comm, comm)`` (DeepSeek-V3 report, section 3.2.1); any other unit takes ``total``."""
        forward = [a.stage for a in unit if a.kind == "F"]
        backward = [a.stage for a in unit if a.kind in ("B", "I")]
        if not (forward and backward):
            return total
        comm = float(self.hidden[forward[0]][0] + self.hidden[backward[0]][1])
        return max(total - comm, comm)

    def spans(self, unit: tuple[Action, ...], device: int, start: float,
              end: float) -> tuple[tuple[Action, float, float], ...]:
        """``unit``'s actions on ``device`` as (action, start, end) one after another from
        ``start`` to ``end`` seconds, each its share of their durations (an overlapped pair's
        chunks run side by side; a timeline shows them in turn)."""
        if len(unit) == 1:
            return ((unit[0], start, end),)
        seconds = [self.duration(action, device) for action in unit]
        scale = (end - start) / sum(seconds) if sum(seconds) > 0 else 0.0
        found, begin = [], start
        for action, share in zip(unit, seconds, strict=True):
            found.append((action, begin, begin + share * scale))
            begin += share * scale
        found[-1] = (unit[-1], found[-1][1], end)
        return tuple(found)

    def work(self, num_microbatches: int, split: bool) -> list[float] | None:
        """Per GPU, the seconds of compute (``compute``) of every action it runs with
        ``num_microbatches`` (I and W backwards when ``split``): no action of it takes less
        (None when some GPU's transfer overhead is negative, or an overlapped pair may hide
        communication: then one might)."""
        if min(self.transfer_costs, default=0.0) < 0 or any(h.any() for h in self.hidden):
            return None
        kinds = ("F", "I", "W") if split else ("F", "B")
        work = [0.0] * len(self.devices)
        for s, stage in enumerate(self.stages):
            for device, mine in zip(stage.devices, stage.replica_microbatches(num_microbatches),
                                    strict=True):
                work[device] += len(mine) * sum(self.compute(s, kind, device) for kind in kinds)
        return work
