"""What a pipeline planner is given: a chain, a device graph and the number of microbatches."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from dlsched.collectives.nccl import NcclNode
from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import DeviceGraph
from dlsched.pipeline.chains.chain import Chain
from dlsched.pipeline.chains.memory_model import RECOMPUTE_MODES, check_recompute
from dlsched.pipeline.chains.tensor_parallel import (
    check_degree,
    group_graph,
    ring_allreduce_s,
    tp_allreduce_s,
    valid_degrees,
)
from dlsched.pipeline.plans.plan import PipelinePlan, Stage
from dlsched.pipeline.simulation.network import check_network
from dlsched.validation import MICROBATCHES


@dataclass(frozen=True, eq=False)
class PipelineProblem:
    """One planning instance; ``num_microbatches`` microbatches per iteration;
    ``recompute_modes`` the activation recomputation modes planners may choose from;
    ``network`` how transfers share the network (``pipeline.network``: fifo or ps);
    ``replicate`` whether a stage may run data-parallel on several GPUs (False for runtimes
    that run one rank per stage, such as ``torch.distributed.pipelining``: every planner then
    keeps to one GPU per stage); ``tensor_parallel`` the tensor-parallel degrees planners may
    choose (None: every degree the chain and graph allow, ``pipeline.tensor_parallel``; 1
    only without replication); ``runnable_only`` whether planners keep to plans an existing
    runtime executes (``pipeline.runtimes``); ``nccl`` the NVIDIA node NCCL runs the TP
    all-reduces on (``collectives.nccl``: priced as NCCL's tuner prices them, as the job
    evaluator does; None: a ring on the graph's links, ``pipeline.tensor_parallel``).

    ``tensor(t)`` is the instance at degree ``t``: its devices are the TP groups (their GPUs
    in ``gpu_groups``), its chain the per-GPU costs of a group; plans at that degree index
    its devices, and ``for_plan`` finds the instance a plan runs on."""

    chain: Chain
    graph: DeviceGraph
    num_microbatches: int
    recompute_modes: tuple[str, ...] = RECOMPUTE_MODES
    network: str = "fifo"
    replicate: bool = True
    tensor_parallel: tuple[int, ...] | None = None
    gpu_groups: tuple[tuple[int, ...], ...] | None = None
    runnable_only: bool = False
    nccl: NcclNode | None = None

    def __post_init__(self) -> None:
        MICROBATCHES.check(self.num_microbatches, "microbatches")
        if not self.recompute_modes:
            raise ConfigError("recompute: at least one mode is needed; accepted: "
                              + ", ".join(RECOMPUTE_MODES))
        for mode in self.recompute_modes:
            check_recompute(mode)
        check_network(self.network)
        if self.tensor_parallel is not None and not self.tensor_parallel:
            raise ConfigError("tensor_parallel: at least one degree is needed")
        if self.tensor_parallel is not None and self.gpu_groups is None:
            if not self.replicate and self.tensor_parallel != (1,):
                raise ConfigError("tensor_parallel: one GPU per stage (no replication, e.g. "
                                  "for torch) accepts degree 1 only")
            for t in self.tensor_parallel:
                check_degree(self.graph, self.chain.tensor_layout, t)
        object.__setattr__(self, "_variants", {self.chain.recompute: self})
        object.__setattr__(self, "_degrees", {self.degree: self})
        object.__setattr__(self, "_root", self)

    def under(self, mode: str) -> PipelineProblem:
        """This instance with the chain under recomputation ``mode`` (cached)."""
        variants = self._variants
        if mode not in variants:
            variants[mode] = replace(self, chain=self.chain.with_recompute(mode))
            object.__setattr__(variants[mode], "_root", self._root)
        return variants[mode]

    @property
    def gpu_flops(self) -> np.ndarray:
        """``graph.flops`` (FLOP/s per GPU), built once per instance (read-only)."""
        flops = self.__dict__.get("_gpu_flops")
        if flops is None:
            flops = self.graph.flops
            flops.setflags(write=False)
            object.__setattr__(self, "_gpu_flops", flops)
        return flops

    @property
    def root(self) -> PipelineProblem:
        """The instance this one was derived from by ``tensor`` and ``under`` (itself if
        none): every TP degree and recomputation mode of one planning instance shares it."""
        return self._root

    @property
    def degree(self) -> int:
        """The tensor-parallel degree of this instance's devices (1: single GPUs)."""
        return 1 if self.gpu_groups is None else len(self.gpu_groups[0])

    def check_state_fits(self, option: str = "--model") -> None:
        """ConfigError naming ``option`` when the model's static state (weights, gradients,
        optimizer state: ``Chain.static_bytes`` without the transients) exceeds the usable
        memory of every GPU together: no partition, TP degree or schedule can then fit (each
        block's state is held in full on one stage, or split over a TP group's GPUs), so the
        planners' search (minutes at thousands of microbatches) is not entered."""
        chain = self.chain
        need = float(chain.param_bytes.sum() * chain.state_factor)
        have = sum(chain.usable(device.memory) for device in self.graph.devices)
        if need > have:
            raise ConfigError(f"{option}: {chain.name}'s weights, gradients and optimizer "
                              f"state ({need / 2**30:,.1f} GiB) exceed the usable memory of "
                              f"all {len(self.graph.devices)} GPUs together "
                              f"({have / 2**30:,.1f} GiB), so no plan fits; accepted: a "
                              "smaller model, more or larger GPUs (--devices), or fewer "
                              "bytes per parameter (--state-bytes)")

    def degrees(self) -> tuple[int, ...]:
        """The tensor-parallel degrees planners search, ascending."""
        if self.gpu_groups is not None:
            return (self.degree,)
        if self.tensor_parallel is None:
            return valid_degrees(self.graph, self.chain.tensor_layout) if self.replicate else (1,)
        return tuple(sorted(set(self.tensor_parallel)))

    def tensor(self, t: int) -> PipelineProblem:
        """This instance at tensor-parallel degree ``t`` (cached; see the class docstring)."""
        cached = self._degrees
        if t not in cached:
            if self.gpu_groups is not None:
                cached[t] = self._root.tensor(t).under(self.chain.recompute)
                return cached[t]
            groups = check_degree(self.graph, self.chain.tensor_layout, t)
            layout = self.chain.tensor_layout
            message_s = tp_allreduce_s(self.graph, groups[0], layout.message_bytes, self.nccl)
            chain = self.chain.with_tensor_parallel(t, message_s, self.graph.devices[0].flops)
            cached[t] = replace(self, chain=chain, graph=group_graph(self.graph, groups),
                                tensor_parallel=(t,), gpu_groups=tuple(groups))
            object.__setattr__(cached[t], "_root", self)
        return cached[t]

    def for_plan(self, plan: PipelinePlan) -> PipelineProblem:
        """The instance ``plan`` runs on: its tensor-parallel degree and recomputation."""
        return self.tensor(plan.tensor_parallel).under(plan.recompute)

    def stage_flops(self, stage: Stage) -> tuple[float, float]:
        """(forward, backward) FLOP per microbatch of a stage (found once per block range)."""
        known = self.__dict__.setdefault("_stage_flops", {})
        blocks = (stage.first, stage.last)
        if blocks not in known:
            chain = self.chain
            known[blocks] = (float(chain.forward_flops[stage.first:stage.last].sum()),
                             float(chain.backward_flops[stage.first:stage.last].sum()))
        return known[blocks]

    def allreduce_time(self, stage: Stage) -> float:
        """Seconds of a ring all-reduce of the stage's gradients over its replicas, alone on
        the network.

        The ring visits the replicas in listed order; in each of its 2(r-1) steps every
        replica sends 1/r of the gradient to the next at once, so a step takes its slowest
        ring link's latency + (P / r) / bandwidth. 0 for one replica.
        """
        return ring_allreduce_s(self.graph, stage.devices,
                                float(self.chain.param_bytes[stage.first:stage.last].sum()))

    def action_flops(self, stage: Stage) -> tuple[float, float]:
        """(forward, backward) FLOP of one action of a stage: a microbatch, or a replica's
        part of it on a split stage."""
        forward, backward = self.stage_flops(stage)
        return forward * stage.share, backward * stage.share

    def stage_times(self, stage: Stage) -> np.ndarray:
        """Seconds of (forward, backward) of one action on each replica: shape (r, 2)."""
        forward, backward = self.action_flops(stage)
        flops = self.gpu_flops[list(stage.devices)]
        return np.stack([forward / flops, backward / flops], axis=1)
