"""Price one layout of a job: iteration seconds, FLOP rates, memory and exposed communication.

The evaluation composes the domains (``job`` package docstring): per-block seconds
(``job.layer_costs``) make each virtual stage's forward and backward (its layers by the
layout's ``pipeline_split``, ``job.pipeline_split``: ``layers / (pp x chunks)`` when even, the
embedding on the first stage, the head on the last, as Megatron-Core splits a GPT); ZeRO 3
adds per layer the all-gather of its weights in the forward and again in the backward and the
reduce-scatter of its gradients, each prefetched behind the layer's compute (exposed: what
exceeds it), per microbatch as Megatron-FSDP runs it; PyTorch's FSDP2 under a pipeline schedule
(TorchTitan) gathers each unit once per iteration and reduce-scatters after each stage's last
backward (``job.communication.fsdp2_costs``). One replica's pipeline is timed by
``job.pipeline_time`` (``fast=False``: by the pipeline simulator) with its transfers blocking
or beside the compute (``job.pipeline_p2p``), each pipeline rank then runs its data-parallel
step (``job.dp_sync``), and the iteration ends when the last rank's does.

Reported FLOP rates: ``tflops_per_gpu`` counts the FLOP executed, recomputation included (what
Megatron-LM SC21's Eq. 3 counts with full recomputation: "hardware FLOP"), ``mfu`` the model
FLOP without recomputation over the GPUs' dense 16-bit peak, ``hfu`` the executed ones.
Exposed communication: ``tp_s`` the TP collectives on the critical rank (they block), ``pp_s``
what the pipeline transfers (and the TP gathers of their pieces) add to the replica (its
timing without them, from the same walk: ``job.evaluation.pipeline_steady``), ``dp_s`` the
data-parallel step's exposed reduction and gathers, ``zero3_s`` ZeRO 3's exposed per-layer
traffic on the critical rank, ``cp_s`` context parallelism's (``job.context_parallel``: the
ring's transfers beyond the attention they overlap, or the all-to-alls) on it. ZeRO shards
and the DP step reduce over the CP x DP ranks (Megatron-Core's data-parallel group with
context parallelism: ``get_data_parallel_group(with_context_parallel=True)`` for the gradient
buffers and the distributed optimizer).
``ep_a2a_s`` the MoE layers' dispatch and combine All-to-Alls on the critical rank (they block,
``job.moe_costs``, but for what DualPipe's pairs or Megatron-Core's merged EP-overlap steps hide:
``job.evaluation.a2a_overlap``). An MoE model's routed experts' gradients are reduced over the
expert-data-parallel group after the dense ones (``dp_s`` holds both).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from dlsched.errors import ConfigError
from dlsched.hardware import Topology
from dlsched.job.cluster import System
from dlsched.job.communication.collective_costs import curve
from dlsched.job.communication.context_parallel import check_cp
from dlsched.job.communication.dp_sync import DPStep, dp_step
from dlsched.job.communication.fsdp2_costs import fsdp2_ends
from dlsched.job.compute.block_pricing import check_kernel_options
from dlsched.job.compute.block_recompute import block_layers, check_block, recomputed_layers
from dlsched.job.compute.eager_ops import check_ops
from dlsched.job.compute.layer_costs import BlockCosts, gpu_compute
from dlsched.job.compute.module_recompute import (
    check_for_model,
    flops_per_token,
    module_flops,
    modules_of,
)
from dlsched.job.compute.moe_costs import (
    check_moe_layout,
)
from dlsched.job.compute.op_checkpoint import check_op_checkpoint, recompute_flops_per_token
from dlsched.job.evaluation.pipeline_time import (
    PipelineTimes,
    ReplicaTiming,
    event_pipeline,
    replica_timings,
)
from dlsched.job.evaluation.replica import (
    executed_times,
    fsdp2_pipeline_ends,
    replica_parts,
)
from dlsched.job.evaluation.unit_walk import (
    held_stages,
    hidden_comm,
    microbatch_share,
    unit_bound,
    unit_walked,
)
from dlsched.job.execution import GROUPS, Execution
from dlsched.job.memory.allocator import fragmentation_margin
from dlsched.job.memory.moe import experts_per_gpu, moe_dense_delta, stage_moe_layers
from dlsched.job.memory.parameters import (
    embedding_parameters_per_gpu,
    head_parameters_per_gpu,
    stage_parameters,
)
from dlsched.job.memory.per_gpu import MemoryBreakdown, layer_parameters_per_gpu, peak_memory
from dlsched.job.memory.sharded_units import layer_unit
from dlsched.job.model_spec import Model
from dlsched.job.run_settings import RunSettings
from dlsched.units import format_bytes


@dataclass(frozen=True)
class Job:
    """What is trained (``spec``) and what it runs on (``cluster``); how it is parallelised and
    run (the layout and its run settings, ``Execution.run``) is the ``Execution`` each
    evaluation prices."""

    spec: Model
    cluster: System

    def __post_init__(self) -> None:
        if not isinstance(self.cluster, System):  # Job held the run settings third before
            raise ConfigError(f"cluster: a job.cluster.System, not {self.cluster!r}")


def check_run(job: Job, run: RunSettings) -> None:
    """ConfigError naming the setting when ``run`` cannot run ``job``: the checks that relate
    the settings to the model and the GPU (eager ops only on a Llama-like model,
    ``job.compute.eager_ops``; FP8 and the kernel options on a GPU and model that run them,
    ``job.compute.block_pricing``; the fused attention on a GPU with a cuDNN rate)."""
    check_ops(run.ops, job.spec)
    check_kernel_options(run.precision, run.fp8_recipe, job.cluster.gpu,
                         bool(job.spec.experts), run.fp8_all_gather, run.compile, run.async_tp)
    if run.attention == "fused":  # refused here when the GPU gives no cuDNN rate
        gpu_compute(job.cluster.gpu, run.precision).gpu.efficiency("fused_attention",
                                                                   run.precision)


@dataclass(frozen=True)
class JobResult:
    """One evaluated layout (see the module docstring; seconds, bytes, FLOP/s)."""

    layout: Execution
    iteration_s: float
    tflops_per_gpu: float
    mfu: float
    hfu: float
    memory: dict[str, float]
    exposed: dict[str, float]
    replica: ReplicaTiming
    bound_s: float
    notes: tuple[str, ...] = ()
    extra: dict[str, object] = field(default_factory=dict)
    quiet_s: float = 0.0
    """The replica's end with its transfers free (what ``pp_s`` is measured against)."""
    busiest_work_s: float = 0.0
    """The busiest pipeline rank's compute over the iteration's microbatches."""
    fits: bool = True
    """Whether the memory fits the GPU as the search checks it (``memory_fits``)."""

    @property
    def memory_bytes(self) -> float:
        """Peak bytes per GPU."""
        return sum(self.memory.values())

    def row(self, job: Job) -> dict[str, object]:
        """A flat record for tables, CSV and JSON."""
        run = self.layout.run
        return {"model": job.spec.name, "gpus": self.layout.gpus, **self.layout.row(),
                "precision": run.precision, "attention": run.attention,
                "collective_policy": run.collective_policy, "dp_policy": run.dp_policy,
                "iteration_s": self.iteration_s,
                "tflops_per_gpu": self.tflops_per_gpu, "mfu": self.mfu, "hfu": self.hfu,
                "memory_gib": self.memory_bytes / 2**30,
                **{f"memory_{k}_gib": v / 2**30 for k, v in self.memory.items()},
                **{f"exposed_{k}": v for k, v in self.exposed.items()},
                "bound_s": self.bound_s, "time_over_bound": self.iteration_s / self.bound_s,
                "notes": list(self.notes), **self.extra}


def check_layout(job: Job, layout: Execution) -> None:
    """ConfigError naming the field when ``layout`` cannot run ``job``."""
    spec = job.spec
    if layout.gpus != job.cluster.num_gpus:
        raise ConfigError(f"layout: TP x CP x PP x DP = {layout.gpus} differs from the "
                          f"cluster's {job.cluster.num_gpus} GPUs")
    check_moe_layout(spec, layout)
    check_op_checkpoint(spec, layout)
    check_for_model(layout.recompute, spec.experts, spec.shared_experts, bool(spec.kv_lora_rank))
    check_block(spec, layout)  # job.compute.block_recompute
    layout.stage_layers(spec.layers, spec.mtp_layers)  # ConfigError when they do not split
    if spec.heads % layout.tp:
        raise ConfigError(f"{layout.tp} does not divide the {spec.heads} heads", "tp")
    check_cp(spec, layout)
    if layout.schedule == "interleaved" and layout.num_microbatches % layout.pp:
        raise ConfigError(f"interleaving needs microbatches per replica "
                          f"({layout.num_microbatches}) to be a multiple of PP ({layout.pp}), "
                          "as Megatron-LM requires", "global_batch")


def dp_group(job: Job, layout: Execution) -> Topology | None:
    """The network of the group a dense layer's gradients are reduced (and ZeRO-sharded)
    over: the CP x DP ranks of one TP rank and pipeline stage, as Megatron-Core's
    data-parallel-with-context-parallel group (``Execution.group``)."""
    return layout.group("dp_cp", job.cluster)


def pipeline_times(job: Job, layout: Execution) -> tuple[PipelineTimes, BlockCosts,
                                                      tuple[float, float]]:
    """The replica's per-stage seconds, the block costs and ZeRO 3's exposed seconds
    (``replica_parts``)."""
    parts = replica_parts(job, layout)
    return parts.times, parts.costs, parts.zero3


def evaluate(job: Job, layout: Execution, fast: bool = True) -> JobResult:
    """Price ``layout`` for ``job`` (module docstring); ConfigError when it cannot run."""
    check_run(job, layout.run)
    check_layout(job, layout)
    parts = replica_parts(job, layout)
    times, costs, zero3 = parts.times, parts.costs, parts.zero3
    executed = executed_times(job, layout, times)
    # one walk times the replica with its transfers and without them (``pp_s``: what they add)
    walked, quiet = replica_timings(executed, replace(times, send=(0.0,) * len(times.send)))
    # the merged EP-overlap steps (pair_seconds, moe_a2a_overlap) have the fast walk only
    replica = walked if fast or executed.pair_seconds else event_pipeline(executed)
    steps = _rank_dps(job, layout, times, parts.embed_b)
    ends = [replica.last_backward_end[r] + steps[r].total for r in range(layout.pp)]
    iteration = max(replica.end, *ends)
    critical = max(range(layout.pp), key=lambda r: ends[r])
    run = layout.run
    flops = _flops(job.spec, layout, run.attention)
    peak = gpu_compute(job.cluster.gpu, run.precision).peak_flops
    share = microbatch_share(layout.schedule)  # DualPipe: a microbatch passes half the layers
    per_rank = layout.rank_layers(job.spec.layers, critical, job.spec.mtp_layers) * share
    m = layout.num_microbatches
    memory = layout_memory(job, layout)
    cp, moe = parts.cp, parts.moe
    sparse = stage_moe_layers(job.spec, layout, critical) * share
    moe_tp = sparse * (moe.tp_forward_s + moe.tp_backward_s) if moe else 0.0
    exposed = {"tp_s": m * ((per_rank - sparse) * (costs.tp_forward_s + costs.tp_backward_s)
                            + moe_tp),
               "ep_a2a_s": max(0.0, m * sparse * (moe.a2a_forward_s + moe.a2a_backward_s)
                               - hidden_comm(times, critical)) if moe else 0.0,
               "pp_s": max(0.0, replica.end - quiet.end),
               "dp_s": steps[critical].exposed_reduce + steps[critical].gather,
               "zero3_s": m * per_rank * (zero3[0] + zero3[1]),
               "cp_s": m * per_rank * (cp.forward_s + cp.backward_s),
               "grad_accumulation_s": m * share * sum(
                   parts.accumulation[stage] for stage
                   in held_stages(layout.schedule, layout.pp, layout.chunks, critical)),
               "optimizer_s": steps[critical].optimizer}
    result = JobResult(layout, iteration, flops["hardware"] / (iteration * layout.gpus) / 1e12,
                       flops["model"] / (iteration * layout.gpus * peak),
                       flops["hardware"] / (iteration * layout.gpus * peak),
                       memory.parts(), exposed, replica, _bound(times),
                       quiet_s=quiet.end, busiest_work_s=_busiest_work(times),
                       fits=memory_fits(job, layout, memory))
    return replace(result, notes=_notes(job, result))


def layout_memory(job: Job, layout: Execution) -> MemoryBreakdown:
    """The memory of ``layout``'s busiest GPU (``peak_memory``) under its run settings, on
    the cluster's GPU."""
    run = layout.run
    return peak_memory(job.spec, layout, run.precision, run.grad_bytes, run.attention,
                       run.runtime, job.cluster.gpu.name)


def memory_fits(job: Job, layout: Execution, memory: MemoryBreakdown) -> bool:
    """Whether ``memory`` fits the cluster's GPU less its runtime reserve and the run's
    fragmentation margin (``job.memory.allocator.fragmentation_margin``): the one check of
    the search, the plan's note and ``dlsched validate``'s admission."""
    return memory.fits(job.cluster.memory,
                       fragmentation_margin(layout.run.expandable_segments))


def _busiest_work(times: PipelineTimes) -> float:
    """The busiest pipeline rank's compute (seconds): its stages' forwards and backwards over
    the microbatches."""
    work = [0.0] * times.pp
    for stage, (f, b) in enumerate(zip(times.forward, times.backward, strict=True)):
        work[stage % times.pp] += times.num_microbatches * (f + b)
    return max(work)


def _rank_dps(job: Job, layout: Execution, times: PipelineTimes,
              embedding_backward_s: float = 0.0) -> list[DPStep]:
    """The DP step of each pipeline rank: what they share (the stages' parameters, the DP
    group's curves, the GPU) priced once, and ranks whose steps have equal inputs (1F1B's
    middle ranks) priced once. PyTorch's FSDP2 without PP adds its first all-gathers and last
    reduce-scatters (``job.communication.fsdp2_costs``; ``embedding_backward_s``, seconds: what
    block 0's reduce-scatter, the backward's last, overlaps); under PP its once-per-iteration
    gathers (the first microbatch's forward, counted after the replica as the same delay) and
    each rank's reduce-scatters after its stages' last backwards
    (``replica.fsdp2_pipeline_ends``)."""
    spec, tp = job.spec, layout.tp
    stages = stage_parameters(spec, layout)
    spans = layout.stage_layers(spec.layers, spec.mtp_layers)
    group = dp_group(job, layout)
    op = "all-reduce" if layout.zero == 0 else "reduce-scatter"
    run = layout.run
    curves = (curve(group, op, run.collective_policy),
              curve(group, "all-gather", run.collective_policy))
    compute = gpu_compute(job.cluster.gpu, run.precision)
    experts = None
    # FSDP2 under PP (else zeros): seconds every rank starts late, each rank's reduce-scatters
    pipeline_start, rank_reduces = fsdp2_pipeline_ends(job, layout, times)
    priced: dict[tuple, DPStep] = {}
    steps = []
    for rank in range(layout.pp):
        held = held_stages(layout.schedule, layout.pp, layout.chunks, rank)
        total = round(sum(stages[stage] for stage in held))
        # interleaved 1F1B ends each rank on its first chunk's (stage ``rank``) backward, the
        # V and DualPipe on the stage nearer the start of its direction
        final = min(held)
        span = spans[final]
        seconds = times.backward[final] / len(span) if span else 0.0
        final_layers = _dense_layer_parameters(spec, tp, span)
        units = _gather_units(job, layout, times, rank) if run.overlap_param_gather else ()
        key = (tuple(final_layers), total, seconds, len(span), units)
        if key not in priced:
            priced[key] = dp_step(final_layers, total - sum(final_layers),
                                  [seconds] * len(span), layout.zero, layout.cp * layout.dp,
                                  *curves, compute, run.dp_policy, units, run.grad_bytes,
                                  run.master_weights)
        dense = priced[key]
        if layout.fsdp2(run.sharding, pipelined=False):
            first_gathers, last_reduces = fsdp2_ends(
                spec, tp, run.sharding,
                layer_unit(spec, tp, run.precision, run.sharding, run.fp8_all_gather,
                           run.grad_bytes),
                run.grad_bytes, *curves, embedding_backward_s, compute.gpu.memory_rate)
            dense = replace(dense, exposed_reduce=dense.exposed_reduce + last_reduces,
                            gather=dense.gather + first_gathers)
        elif rank_reduces[rank] or pipeline_start:  # the replica starts late (every rank)
            dense = replace(dense, exposed_reduce=dense.exposed_reduce + rank_reduces[rank],
                            gather=dense.gather + pipeline_start)
        sparse = stage_moe_layers(spec, layout, rank)
        if not sparse:
            steps.append(dense)
            continue
        # the experts' gradients over the expert-DP group, after the dense ones (same NICs)
        experts = experts or layout.group("expert_dp", job.cluster)
        routed = dp_step([], round(sparse * experts_per_gpu(spec, layout)), [], layout.zero,
                         layout.expert_dp, curve(experts, op, run.collective_policy),
                         curve(experts, "all-gather", run.collective_policy), compute, "none",
                         grad_bytes=run.grad_bytes, master_weights=run.master_weights)
        steps.append(DPStep(dense.exposed_reduce + routed.exposed_reduce,
                            dense.optimizer + routed.optimizer, dense.gather + routed.gather))
    return steps


def _dense_layer_parameters(spec: Model, tp: int, layers: range) -> list[float]:
    """Parameters per GPU of each of ``layers`` without its routed experts (an MoE layer's
    router and shared experts in place of the dense FFN), as ``stage_parameters`` counts them."""
    layer = layer_parameters_per_gpu(spec, tp)
    delta = moe_dense_delta(spec, tp) if spec.experts else 0.0
    return [layer + delta * spec.is_moe_layer(index) for index in layers]


def _gather_units(job: Job, layout: Execution, times: PipelineTimes,
                  rank: int) -> tuple[tuple[float, float], ...]:
    """(dense parameters per GPU, forward seconds of one microbatch) of rank ``rank``'s units in
    forward order: the embedding, each chunk's layers (its virtual stage's forward spread over
    them, the embedding's and head's time included; a stage without layers gives its forward
    to the embedding or the head), the head (``job.dp_sync``); parameters counted as
    ``stage_parameters`` counts them."""
    spec, tp = job.spec, layout.tp
    spans = layout.stage_layers(spec.layers, spec.mtp_layers)
    units: list[tuple[float, float]] = []
    held = held_stages(layout.schedule, layout.pp, layout.chunks, rank)
    if 0 in held:
        units.append((embedding_parameters_per_gpu(spec, tp),
                      0.0 if spans[0] else times.forward[0]))
    for stage in held:
        span = spans[stage]
        seconds = times.forward[stage] / len(span) if span else 0.0
        units += [(params, seconds) for params in _dense_layer_parameters(spec, tp, span)]
    if len(spans) - 1 in held:
        units.append((head_parameters_per_gpu(spec, layout),
                      0.0 if spans[-1] else times.forward[-1]))
    return tuple(units)


def _flops(spec: Model, layout: Execution, attention: str = "flash") -> dict[str, float]:
    """Model and executed FLOP of one iteration (module docstring); ``selective-op`` runs
    ``job.op_checkpoint``'s recomputed matmuls again (and an unfused attention core),
    Megatron-Core's per-module recomputation its modules' (``job.compute.module_recompute``)."""
    tokens = layout.global_batch * spec.seq
    model = spec.model_flops_per_token() * tokens
    def forward_of(layers: int, sparse: int) -> float:  # per token: matmuls and cores
        return (2 * (layers - sparse) * spec.layer_matmul_elements()
                + 2 * sparse * spec.layer_matmul_elements(moe=True)
                + layers * spec.attention_core_flops())

    moe, core = spec.moe_layers, spec.attention_core_flops() * spec.layers
    forward = forward_of(spec.layers, moe)
    if block_layers(layout.recompute) is not None:  # the first N layers of each chunk again
        heads = [recomputed_layers(layout.recompute, span)[0]
                 for span in layout.stage_layers(spec.layers, spec.mtp_layers)]
        again = sum(forward_of(len(head), spec.moe_layers_in(head.start, head.stop))
                    for head in heads if head)
        return {"model": model, "hardware": model + again * tokens}
    modules = modules_of(layout.recompute)  # Megatron-Core's --recompute-modules
    if modules:
        return {"model": model,
                "hardware": model + flops_per_token(modules, module_flops(spec)) * tokens}
    again = {"none": 0.0, "selective": core, "full": float(forward),
             "selective-op": spec.layers * recompute_flops_per_token(spec, attention)}
    return {"model": model, "hardware": model + again[layout.recompute] * tokens}


def _bound(times: PipelineTimes) -> float:
    """A lower bound on the replica: the busiest rank's compute, plus what the first
    microbatch's forward must pass before that rank's first action can start and, unless the
    backward is split (ZB-H1: a rank may end on a weight gradient nothing waits for), what the
    last backward must pass after its last."""
    pp, m = times.pp, times.num_microbatches
    if unit_walked(times):  # in units: ZB-V, DualPipe(V), merged EP-overlap steps
        return unit_bound(times)
    work = [0.0] * pp
    for s, (f, b) in enumerate(zip(times.forward, times.backward, strict=True)):
        work[s % pp] += m * (f + b)
    before = [sum(times.forward[:r]) for r in range(pp)]
    share = 0.0 if times.schedule == "zb-h1" else 1.0
    after = [share * sum(times.backward[:r]) for r in range(pp)]
    return max(work[r] + before[r] + after[r] for r in range(pp))


def _notes(job: Job, result: JobResult) -> tuple[str, ...]:
    notes = []
    gpu = gpu_compute(job.cluster.gpu, result.layout.run.precision).gpu
    best = getattr(gpu.spec, "best_published_utilization", None)
    if best is not None and result.mfu > best:
        notes.append(f"MFU {result.mfu:.1%} is above the best published for {gpu.spec.name} "
                     f"({best:.0%}): treat the prediction with care")
    if not result.fits:
        notes.append(f"needs {format_bytes(result.memory_bytes)} per GPU: more than a "
                     f"{format_bytes(job.cluster.memory)} GPU leaves after its runtime "
                     "reserve and fragmentation")
    straddling = _straddling(job, result.layout)
    if straddling:
        notes.append(f"{result.layout.label()}: " + ", ".join(straddling) + " straddle the "
                     f"{job.cluster.topology.dims[0].size}-GPU NVLink domains unevenly, each "
                     "priced as its worst copy (ranks per domain x domains)")
    return tuple(notes)


def _straddling(job: Job, layout: Execution) -> list[str]:
    """Each communication group of ``layout`` some copy of which straddles an NVLink domain
    boundary unevenly (``job.group_placement``), as ``DP (16 ranks: 8x2)``."""
    labels = {"tp": "TP", "cp": "CP", "dp_cp": "DP" if layout.cp == 1 else "DP x CP",
              "pp": "PP", "expert_tp": "expert TP", "ep": "EP", "expert_dp": "expert DP"}
    found = []
    for name, (expert, _) in GROUPS.items():
        stride, size = layout.group_ranks(name)
        shape = job.cluster.placement(stride, size)
        if shape is None or not shape.straddles or (expert and not job.spec.experts):
            continue
        found.append(f"{labels[name]} ({size} ranks: {shape.per_node}x{shape.nodes})")
    return found
