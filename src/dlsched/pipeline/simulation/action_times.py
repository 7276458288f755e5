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

    def work(self, num_microbatches: int, split: bool) -> list[float] | None:
        """Per GPU, the seconds of compute (``compute``) of every action it runs with
        ``num_microbatches`` (I and W backwards when ``split``): no action of it takes less
        (None when some GPU's transfer overhead is negative: then one might)."""
        if min(self.transfer_costs, default=0.0) < 0:
            return None
        kinds = ("F", "I", "W") if split else ("F", "B")
        work = [0.0] * len(self.devices)
        for s, stage in enumerate(self.stages):
            for device, mine in zip(stage.devices, stage.replica_microbatches(num_microbatches),
                                    strict=True):
                work[device] += len(mine) * sum(self.compute(s, kind, device) for kind in kinds)
        return work
