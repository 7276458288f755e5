"""Price one layout of a job: iteration seconds, FLOP rates, memory and exposed communication.

The evaluation composes the domains (``job`` package docstring): per-block seconds
(``job.layer_costs``) make each virtual stage's forward and backward (``layers / (pp x
chunks)`` layers, the embedding on the first stage, the head on the last, as Megatron-LM
splits a GPT); ZeRO 3 adds per layer the all-gather of its weights in the forward and again in
the backward and the reduce-scatter of its gradients, each prefetched behind the layer's
compute (exposed: what exceeds it). One replica's pipeline is timed by ``job.pipeline_time``
(``fast=False``: by the pipeline simulator), each pipeline rank then runs its data-parallel step
(``job.dp_sync``), and the iteration ends when the last rank's does.

Reported FLOP rates: ``tflops_per_gpu`` counts the FLOP executed, recomputation included (what
Megatron-LM SC21's Eq. 3 counts with full recomputation: "hardware FLOP"), ``mfu`` the model
FLOP without recomputation over the GPUs' dense 16-bit peak, ``hfu`` the executed ones.
Exposed communication: ``tp_s`` the TP collectives on the critical rank (they block), ``pp_s``
what the pipeline transfers add to the replica (the same walk without them), ``dp_s`` the
data-parallel step's exposed reduction and gathers, ``zero3_s`` ZeRO 3's exposed per-layer
traffic on the critical rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from dlsched.errors import ConfigError
from dlsched.job.cluster import Cluster
from dlsched.job.collective_costs import check_policy, curve
from dlsched.job.dp_sync import GRAD_BYTES, WEIGHT_BYTES, DPStep, check_dp_policy, dp_step
from dlsched.job.layer_costs import BlockCosts, block_costs, check_precision, gpu_compute
from dlsched.job.layout import Layout
from dlsched.job.memory import peak_memory
from dlsched.job.model_spec import TransformerSpec
from dlsched.job.pipeline_time import (
    PipelineTimes,
    ReplicaTiming,
    event_pipeline,
    fast_pipeline,
)
from dlsched.units import format_bytes


@dataclass(frozen=True)
class Job:
    """What is trained and what it runs on, and how its collectives are scheduled."""

    spec: TransformerSpec
    cluster: Cluster
    precision: str = "bf16"
    collective_policy: str = "baseline"
    dp_policy: str = "none"

    def __post_init__(self) -> None:
        check_precision(self.precision)
        check_policy(self.collective_policy)
        check_dp_policy(self.dp_policy)


@dataclass(frozen=True)
class JobResult:
    """One evaluated layout (see the module docstring; seconds, bytes, FLOP/s)."""

    layout: Layout
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

    @property
    def memory_bytes(self) -> float:
        """Peak bytes per GPU."""
        return sum(self.memory.values())

    def row(self, job: Job) -> dict[str, object]:
        """A flat record for tables, CSV and JSON."""
        return {"model": job.spec.name, "gpus": self.layout.gpus, **self.layout.row(),
                "precision": job.precision, "collective_policy": job.collective_policy,
                "dp_policy": job.dp_policy, "iteration_s": self.iteration_s,
                "tflops_per_gpu": self.tflops_per_gpu, "mfu": self.mfu, "hfu": self.hfu,
                "memory_gib": self.memory_bytes / 2**30,
                **{f"memory_{k}_gib": v / 2**30 for k, v in self.memory.items()},
                **{f"exposed_{k}": v for k, v in self.exposed.items()},
                "bound_s": self.bound_s, "time_over_bound": self.iteration_s / self.bound_s,
                "notes": list(self.notes), **self.extra}


def check_layout(job: Job, layout: Layout) -> None:
    """ConfigError naming the field when ``layout`` cannot run ``job``."""
    spec = job.spec
    if layout.gpus != job.cluster.num_gpus:
        raise ConfigError(f"layout: TP x PP x DP = {layout.gpus} differs from the cluster's "
                          f"{job.cluster.num_gpus} GPUs")
    if spec.layers % layout.virtual_stages:
        raise ConfigError(f"--pp/--chunks: {spec.layers} layers do not split into PP x chunks "
                          f"= {layout.virtual_stages} equal stages")
    if spec.heads % layout.tp:
        raise ConfigError(f"--tp: {layout.tp} does not divide the {spec.heads} heads")
    if layout.schedule == "interleaved" and layout.num_microbatches % layout.pp:
        raise ConfigError(f"--global-batch: interleaving needs microbatches per replica "
                          f"({layout.num_microbatches}) to be a multiple of PP ({layout.pp}), "
                          "as Megatron-LM requires")


def _costs(job: Job, layout: Layout) -> BlockCosts:
    tp_group = job.cluster.group_topology(1, layout.tp)
    return block_costs(job.spec, layout.microbatch_size, job.cluster.gpu, job.precision,
                       layout.tp, layout.sequence_parallel, layout.recompute, tp_group,
                       job.collective_policy)


def _zero3_exposed(job: Job, layout: Layout, costs: BlockCosts) -> tuple[float, float]:
    """Exposed seconds per layer per microbatch of ZeRO 3's traffic (forward, backward)."""
    if layout.zero != 3 or layout.dp == 1:
        return 0.0, 0.0
    group = job.cluster.group_topology(layout.tp, layout.dp)
    params = job.spec.layer_parameters() / layout.tp
    gather = curve(group, "all-gather", job.collective_policy).seconds(params * WEIGHT_BYTES)
    scatter = curve(group, "reduce-scatter", job.collective_policy).seconds(
        params * GRAD_BYTES)
    return (max(0.0, gather - costs.layer_f),
            max(0.0, gather + scatter - costs.layer_b))


def _send_s(job: Job, layout: Layout) -> float:
    """Seconds of one activation (or gradient) transfer between pipeline ranks: each GPU of
    the TP group sends its ``1/tp`` share (Megatron-LM's scatter-gather of SC21 Sec. 4.1) over
    the slowest link the pipeline group spans."""
    if layout.pp == 1:
        return 0.0
    group = job.cluster.group_topology(layout.tp * layout.dp, layout.pp)
    assert group is not None
    link = min(group.dims, key=lambda dim: dim.bandwidth)
    spec = job.spec
    message = layout.microbatch_size * spec.seq * spec.hidden * 2 / layout.tp
    return link.latency + message / link.bandwidth


def pipeline_times(job: Job, layout: Layout) -> tuple[PipelineTimes, BlockCosts,
                                                      tuple[float, float]]:
    """The replica's per-stage seconds, the block costs and ZeRO 3's exposed seconds."""
    costs = _costs(job, layout)
    extra_f, extra_b = _zero3_exposed(job, layout, costs)
    per_stage = job.spec.layers // layout.virtual_stages
    forward = [per_stage * (costs.layer_f + extra_f)] * layout.virtual_stages
    backward = [per_stage * (costs.layer_b + extra_b)] * layout.virtual_stages
    forward[0] += costs.embed_f
    backward[0] += costs.embed_b
    forward[-1] += costs.head_f
    backward[-1] += costs.head_b
    send = (_send_s(job, layout),) * (layout.virtual_stages - 1)
    times = PipelineTimes(layout.pp, layout.chunks, layout.num_microbatches, layout.schedule,
                          tuple(forward), tuple(backward), send)
    return times, costs, (extra_f, extra_b)


def evaluate(job: Job, layout: Layout, fast: bool = True) -> JobResult:
    """Price ``layout`` for ``job`` (module docstring); ConfigError when it cannot run."""
    check_layout(job, layout)
    times, costs, zero3 = pipeline_times(job, layout)
    replica = fast_pipeline(times) if fast else event_pipeline(times)
    steps = [_rank_dp(job, layout, times, rank) for rank in range(layout.pp)]
    ends = [replica.last_backward_end[r] + steps[r].total for r in range(layout.pp)]
    iteration = max(replica.end, *ends)
    quiet = fast_pipeline(replace(times, send=(0.0,) * len(times.send)))
    critical = max(range(layout.pp), key=lambda r: ends[r])
    flops = _flops(job.spec, layout)
    peak = gpu_compute(job.cluster.gpu, job.precision).peak_flops
    per_rank = layout.chunks * (job.spec.layers // layout.virtual_stages)
    m = layout.num_microbatches
    memory = peak_memory(job.spec, layout, job.precision)
    exposed = {"tp_s": m * per_rank * (costs.tp_forward_s + costs.tp_backward_s),
               "pp_s": max(0.0, replica.end - quiet.end),
               "dp_s": steps[critical].exposed_reduce + steps[critical].gather,
               "zero3_s": m * per_rank * (zero3[0] + zero3[1]),
               "optimizer_s": steps[critical].optimizer}
    result = JobResult(layout, iteration, flops["hardware"] / (iteration * layout.gpus) / 1e12,
                       flops["model"] / (iteration * layout.gpus * peak),
                       flops["hardware"] / (iteration * layout.gpus * peak),
                       memory.parts(), exposed, replica, _bound(times))
    return replace(result, notes=_notes(job, result, memory.fits(job.cluster.memory)))


def _rank_dp(job: Job, layout: Layout, times: PipelineTimes, rank: int) -> DPStep:
    """The DP step of pipeline rank ``rank``."""
    spec, tp = job.spec, layout.tp
    per_stage = spec.layers // layout.virtual_stages
    layer = spec.layer_parameters() // tp
    total = layer * per_stage * layout.chunks
    if rank == 0:
        total += spec.embedding_parameters() // tp
    if rank == layout.pp - 1:
        total += spec.head_parameters() // tp + (spec.vocab * spec.hidden // tp
                                                  if spec.tied_embeddings and layout.pp > 1
                                                  else 0)
    final = rank  # interleaved 1F1B ends each rank on its first chunk's (stage ``rank``) backward
    seconds = times.backward[final] / per_stage
    final_layers = [layer] * per_stage
    group = job.cluster.group_topology(tp, layout.dp)
    op = "all-reduce" if layout.zero == 0 else "reduce-scatter"
    return dp_step(final_layers, total - layer * per_stage, [seconds] * per_stage, layout.zero,
                   layout.dp, curve(group, op, job.collective_policy),
                   curve(group, "all-gather", job.collective_policy),
                   gpu_compute(job.cluster.gpu, job.precision), job.dp_policy)


def _flops(spec: TransformerSpec, layout: Layout) -> dict[str, float]:
    """Model and executed FLOP of one iteration (module docstring)."""
    tokens = layout.global_batch * spec.seq
    model = spec.model_flops_per_token() * tokens
    h, s = spec.hidden, spec.seq
    layer_forward = 2 * (h * spec.qkv_width + h * h + 2 * h * spec.ffn_hidden) + 4 * s * h
    again = {"none": 0.0, "selective": 4.0 * s * h, "full": float(layer_forward)}
    return {"model": model,
            "hardware": model + again[layout.recompute] * spec.layers * tokens}


def _bound(times: PipelineTimes) -> float:
    """A lower bound on the replica: the busiest rank's compute, plus what the first
    microbatch's forward must pass before that rank's first action can start and, unless the
    backward is split (ZB-H1: a rank may end on a weight gradient nothing waits for), what the
    last backward must pass after its last."""
    pp, m = times.pp, times.num_microbatches
    work = [0.0] * pp
    for s, (f, b) in enumerate(zip(times.forward, times.backward, strict=True)):
        work[s % pp] += m * (f + b)
    before = [sum(times.forward[:r]) for r in range(pp)]
    share = 0.0 if times.schedule == "zb-h1" else 1.0
    after = [share * sum(times.backward[:r]) for r in range(pp)]
    return max(work[r] + before[r] + after[r] for r in range(pp))


def _notes(job: Job, result: JobResult, fits: bool) -> tuple[str, ...]:
    notes = []
    gpu = gpu_compute(job.cluster.gpu, job.precision).gpu
    best = getattr(gpu.spec, "best_published_utilization", None)
    if best is not None and result.mfu > best:
        notes.append(f"MFU {result.mfu:.1%} is above the best published for {gpu.spec.name} "
                     f"({best:.0%}): treat the prediction with care")
    if not fits:
        notes.append(f"needs {format_bytes(result.memory_bytes)} per GPU: more than a "
                     f"{format_bytes(job.cluster.memory)} GPU leaves after its runtime "
                     "reserve and fragmentation")
    return tuple(notes)
