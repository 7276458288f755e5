"""What a pipeline planner is given: a chain, a device graph and the number of microbatches."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import DeviceGraph
from dlsched.pipeline.chain import Chain
from dlsched.pipeline.memory_model import RECOMPUTE_MODES, check_recompute
from dlsched.pipeline.network import check_network
from dlsched.pipeline.plan import Stage


@dataclass(frozen=True, eq=False)
class PipelineProblem:
    """One planning instance; ``num_microbatches`` microbatches per iteration;
    ``recompute_modes`` the activation recomputation modes planners may choose from;
    ``network`` how transfers share the network (``pipeline.network``: fifo or ps);
    ``replicate`` whether a stage may run data-parallel on several GPUs (False for runtimes
    that run one rank per stage, such as ``torch.distributed.pipelining``: every planner then
    keeps to one GPU per stage)."""

    chain: Chain
    graph: DeviceGraph
    num_microbatches: int
    recompute_modes: tuple[str, ...] = RECOMPUTE_MODES
    network: str = "fifo"
    replicate: bool = True

    def __post_init__(self) -> None:
        if self.num_microbatches < 1:
            raise ConfigError(f"microbatches: {self.num_microbatches} must be >= 1")
        if not self.recompute_modes:
            raise ConfigError("recompute: at least one mode is needed; accepted: "
                              + ", ".join(RECOMPUTE_MODES))
        for mode in self.recompute_modes:
            check_recompute(mode)
        check_network(self.network)
        object.__setattr__(self, "_variants", {self.chain.recompute: self})

    def under(self, mode: str) -> PipelineProblem:
        """This instance with the chain under recomputation ``mode`` (cached)."""
        variants = self._variants
        if mode not in variants:
            variants[mode] = replace(self, chain=self.chain.with_recompute(mode))
        return variants[mode]

    def stage_flops(self, stage: Stage) -> tuple[float, float]:
        """(forward, backward) FLOP per microbatch of a stage."""
        chain = self.chain
        return (float(chain.forward_flops[stage.first:stage.last].sum()),
                float(chain.backward_flops[stage.first:stage.last].sum()))

    def allreduce_time(self, stage: Stage) -> float:
        """Seconds of a ring all-reduce of the stage's gradients over its replicas, alone on
        the network.

        The ring visits the replicas in listed order; in each of its 2(r-1) steps every
        replica sends 1/r of the gradient to the next at once, so a step takes its slowest
        ring link's latency + (P / r) / bandwidth. 0 for one replica.
        """
        devices = stage.devices
        r = len(devices)
        if r == 1:
            return 0.0
        chunk = float(self.chain.param_bytes[stage.first:stage.last].sum()) / r
        step = max(self.graph.transfer_time(devices[i], devices[(i + 1) % r], chunk)
                   for i in range(r))
        return 2 * (r - 1) * step

    def action_flops(self, stage: Stage) -> tuple[float, float]:
        """(forward, backward) FLOP of one action of a stage: a microbatch, or a replica's
        part of it on a split stage."""
        forward, backward = self.stage_flops(stage)
        return forward * stage.share, backward * stage.share

    def stage_times(self, stage: Stage) -> np.ndarray:
        """Seconds of (forward, backward) of one action on each replica: shape (r, 2)."""
        forward, backward = self.action_flops(stage)
        flops = self.graph.flops[list(stage.devices)]
        return np.stack([forward / flops, backward / flops], axis=1)
