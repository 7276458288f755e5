"""Find the fastest layout of a job, for dlsched and for each baseline in its own space.

Every space is enumerated over the degrees a layout may take (``space``): TP up to the GPUs of
the first network dimension and dividing the heads, PP and chunks that some pipeline split of
the space takes (``job.pipeline_split``: PP x chunks dividing the layers, or the layers with the
embedding and/or the loss counted; each split Megatron-Core accepts for them that places the
layers differently), DP the rest, EP (an MoE model's) every divisor of its experts that divides
CP x DP with expert TP = TP, or TP x CP x DP with expert TP 1 (``expert_tp_degrees``), the
microbatch sizes 1-8 that divide each replica's batch, the schedules, recomputation, sequence
parallelism and ZeRO stage, and CP degrees with their algorithms for long sequences
(``context_degrees``) — minus what the user fixed (``Execution``) or the space leaves out
(TorchTitan's per-op recomputation is tried only when fixed: ``SEARCHED_RECOMPUTE``; in the
Megatron-Core spaces a layout without recomputation that does not fit is tried with block
recomputation of the fewest layers per chunk that fit, ``job.compute.block_recompute``).
The layouts are sorted by a lower bound on their pipeline (``evaluate._bound``: the busiest
rank's compute and the forwards before and backwards after it) and, in that order, those that
fit GPU memory (closed form, ``job.memory``: asked only of the layouts reached) evaluated fast,
with the gradients reduced after the backward, until the bound of the next passes the
``SHORTLIST``-th best time found (overlapping the reduction only shortens an iteration, so no
layout left out could beat them without it); the shortlist is evaluated again with the job's
data-parallel policy, and its ``REFINE`` best by the pipeline simulator: the fastest of those
wins (its simulated time reported beside the fast one).

Spaces (``SPACES``): ``megatron`` is Megatron-LM SC21's practice (TP within a node, 1F1B or
interleaved 1F1B, full recomputation, no sequence parallelism, gradients all-reduced after the
backward), ``megatron-sp`` Korthikanti et al. 2022's (selective recomputation and sequence
parallelism added, the distributed optimizer = ZeRO 1), ``megatron-core`` today's Megatron-Core
practice as NVIDIA's Megatron-Bridge performance recipes run it (the gradients reduced in
buckets beside the backward, ``overlap_grad_reduce``, with the distributed optimizer; sequence
parallelism with TP; no, selective or full recomputation; 1F1B or interleaved 1F1B; the stages
split evenly or with ``--account-for-embedding/loss-in-pipeline-split``),
``fsdp`` ZeRO 3 / FSDP data parallelism without a pipeline, and ``dlsched`` every layout with the
data-parallel policy the job names (dlsched's own by default). ``megatron`` and
``megatron-sp`` split the layers evenly: Megatron-LM then required equal stages (the accounting
options came with Megatron-Core). A baseline runs the job's other settings (precision, kernels,
MoE dispatcher, the weights' gather overlapped or not) as the job names them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from dlsched.errors import ConfigError
from dlsched.job.compute.block_recompute import block_layers, check_block
from dlsched.job.compute.module_recompute import modules_of
from dlsched.job.evaluation.evaluate import (
    Job,
    JobResult,
    _bound,
    check_layout,
    check_run,
    evaluate,
    layout_memory,
    memory_fits,
    pipeline_times,
)
from dlsched.job.evaluation.pipeline_layout import layout_of
from dlsched.job.evaluation.pipeline_split import SPLITS, feasible_splits
from dlsched.job.evaluation.unit_walk import UNIT_CHUNKS, UNIT_SCHEDULES, check_unit_schedule
from dlsched.job.execution import SCHEDULES, SEARCHED_CP_ALGORITHMS, ZERO_STAGES, Execution
from dlsched.job.ranking import POINT, Ranking
from dlsched.validation import MAX_MICROBATCHES

MICROBATCH_SIZES = (1, 2, 4, 8)
MAX_CHUNKS = 8
# Space limit: CP is searched down to this many tokens of each sequence per GPU (8,192: the
# context of Llama 3's pre-training, Meta 2024, which it trained without CP; shorter shares
# only shrink every GEMM); a given --cp is evaluated whatever its share.
CP_MIN_TOKENS = 8192
SHORTLIST = 6
REFINE = 2
# Recomputation searched: Megatron-LM's three modes. TorchTitan's per-op policy (selective-op)
# is tried only when the user fixes it (``Space.given_recompute``): Megatron-LM has no such
# mode, so a searched plan that chose it could not be handed over as Megatron arguments.
SEARCHED_RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Space:
    """What a planner's search may choose (None: anything); ``given_recompute`` and
    ``given_schedules``: modes and schedules it runs only when the user fixes them (ZB-V,
    DualPipe and DualPipeV: ``job.unit_walk``); ``dp_policy``: the gradient reduction the
    planner's practice runs (None: the job's); ``given_core_options``: it runs a Megatron-Core
    pipeline layout (``layout:...``) or per-module recomputation (``modules:...``) the user
    gives (Megatron-Core's options: not Megatron-LM 2021-22's nor FSDP's)."""

    name: str
    schedules: tuple[str, ...] = SCHEDULES
    recompute: tuple[str, ...] = SEARCHED_RECOMPUTE
    sequence_parallel: tuple[bool, ...] = (False, True)
    zero: tuple[int, ...] = ZERO_STAGES
    max_pp: int | None = None
    dp_policy: str | None = None
    splits: tuple[str, ...] = SPLITS
    given_recompute: tuple[str, ...] = ()
    given_schedules: tuple[str, ...] = ()
    given_core_options: bool = False


SPACES = {
    "megatron": Space("megatron", ("1f1b", "interleaved"), ("full",), (False,), (0,),
                      dp_policy="none", splits=("even",)),
    "megatron-sp": Space("megatron-sp", ("1f1b", "interleaved"), ("selective", "full"),
                         (True,), (1,), dp_policy="none", splits=("even",)),
    "megatron-core": Space("megatron-core", ("1f1b", "interleaved"), SEARCHED_RECOMPUTE, (True,),
                           (1,), dp_policy="ddp", given_core_options=True),
    "fsdp": Space("fsdp", ("1f1b",), SEARCHED_RECOMPUTE, (False, True), (3,), max_pp=1,
                  dp_policy="none", given_recompute=("selective-op",)),
    "dlsched": Space("dlsched", given_recompute=("selective-op",),
                     given_schedules=UNIT_SCHEDULES, given_core_options=True),
}
BASELINES = ("megatron", "megatron-sp", "megatron-core", "fsdp")


@dataclass(frozen=True)
class SearchResult:
    """The best layout of a space, the layouts evaluated, pruned and refused, and the
    simulated time of the winner."""

    space: str
    best: JobResult
    evaluated: int
    candidates: int
    simulated_s: float
    shortlist: tuple[JobResult, ...] = ()
    """The shortlist evaluated with the job's data-parallel policy, first by the ranking."""


def divisors(n: int) -> list[int]:
    """Every divisor of ``n``, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(job: Job, choice: Execution, space: Space) -> Iterator[Execution]:
    """Every layout of ``space`` that keeps ``choice``'s fixed fields (module docstring)."""
    spec, gpus = job.spec, job.cluster.num_gpus
    inner = job.cluster.topology.dims[0].size
    fixed = choice.fixed()
    tps = [t for t in divisors(min(inner, gpus)) if spec.heads % t == 0
           and spec.kv_heads % t == 0]  # whole heads and KV heads per TP rank
    eps = [fixed["ep"]] if "ep" in fixed else divisors(max(1, spec.experts))
    # a PP degree some split takes: dividing the layers, or them with the embedding/loss counted
    pps = sorted({d for extra in (0, 1, 2, 2 + spec.mtp_layers)
                  for d in divisors(spec.layers + extra)})
    for tp in [fixed["tp"]] if "tp" in fixed else tps:
        for cp in [fixed["cp"]] if "cp" in fixed else context_degrees(job, tp):
            for pp in ([fixed["pp"]] if "pp" in fixed else pps):
                if gpus % (tp * cp * pp) or (space.max_pp and pp > space.max_pp):
                    continue
                dp = gpus // (tp * cp * pp)
                for etp in expert_tp_degrees(job, tp, fixed):
                    for ep in eps:  # EP degrees: divisors of the experts the ranks can fold
                        if (tp * cp * dp) % (etp * ep) == 0 and \
                                (etp != tp or (cp * dp) % ep == 0):
                            yield from _inner(choice, space, (tp, cp, ep, pp, dp, etp),
                                              spec.layers, spec.mtp_layers)


def expert_tp_degrees(job: Job, tp: int, fixed: dict[str, object]) -> list[int]:
    """Expert-TP degrees searched beside TP ``tp``: the one fixed, else TP itself
    (Megatron-Core's default) and, for an MoE model with TP > 1, 1 (MoE parallel folding, Liu
    et al. 2025: whole experts on each GPU, EP free to span the TP ranks too)."""
    if "expert_tp" in fixed:
        return [int(fixed["expert_tp"])]  # type: ignore[call-overload]
    return [tp, 1] if job.spec.experts and tp > 1 else [tp]


def context_degrees(job: Job, tp: int) -> list[int]:
    """CP degrees searched beside TP ``tp``: those dividing the GPUs left that split each
    sequence into ``2 cp`` equal chunks (Megatron's load-balanced split) and leave each GPU at
    least ``CP_MIN_TOKENS`` of it (1 always)."""
    seq, gpus = job.spec.seq, job.cluster.num_gpus
    return [c for c in divisors(gpus // tp)
            if c == 1 or (seq % (2 * c) == 0 and seq // c >= CP_MIN_TOKENS)]


def _inner(choice: Execution, space: Space, degrees: tuple[int, int, int, int, int, int],
           layers: int, mtp: int = 0) -> Iterator[Execution]:
    """The layouts of the degrees ``(tp, cp, ep, pp, dp, expert tp)`` for ``layers``
    layers and ``mtp`` MTP modules."""
    tp, cp, ep, pp, dp, etp = degrees
    fixed = choice.fixed()
    sizes = [fixed["microbatch_size"]] if "microbatch_size" in fixed else MICROBATCH_SIZES
    splits = tuple(s for s in space.splits if s == fixed.get("pipeline_split", s))
    modes = space.recompute + tuple(mode for mode in space.given_recompute
                                    if fixed.get("recompute") == mode)
    if space.given_core_options:  # a layout or module list the user gives
        if layout_of(str(fixed.get("pipeline_split", ""))):
            splits = (str(fixed["pipeline_split"]),)
        given = str(fixed.get("recompute", ""))
        if modules_of(given) or block_layers(given) is not None:
            modes = (given,)
    for mb in sizes:
        if choice.global_batch % (mb * dp) or choice.global_batch > MAX_MICROBATCHES * mb * dp:
            continue  # the pipeline simulator refining the shortlist takes MAX_MICROBATCHES
        m = choice.global_batch // (mb * dp)
        given = tuple(s for s in space.given_schedules if fixed.get("schedule") == s)
        for schedule in space.schedules + given:
            for chunks, split in _chunks(schedule, layers, m, pp, splits, mtp):
                for recompute in modes:
                    for sp in space.sequence_parallel if tp > 1 else (False,):
                        for zero in space.zero if cp * dp > 1 else (0,):
                            for algorithm in _cp_algorithms(cp, fixed):
                                layout = Execution(tp, pp, dp, mb, choice.global_batch, chunks,
                                                schedule, recompute, sp, zero, cp, ep,
                                                algorithm, etp, split, choice.run)
                                if choice.admits(layout):
                                    yield layout


def _cp_algorithms(cp: int, fixed: dict[str, object]) -> tuple[str, ...]:
    """The CP algorithms a layout of CP ``cp`` is tried with: ring and all-to-all, and
    PyTorch's all-gather only when given (``SEARCHED_CP_ALGORITHMS``)."""
    if cp == 1:
        return ("ring",)
    given = fixed.get("cp_algorithm")
    extra = (given,) if isinstance(given, str) and given not in SEARCHED_CP_ALGORITHMS else ()
    return SEARCHED_CP_ALGORITHMS + extra


def _chunks(schedule: str, layers: int, m: int, pp: int,
            splits: tuple[str, ...], mtp: int = 0) -> list[tuple[int, str]]:
    """(chunks, pipeline split) pairs of ``schedule`` over ``pp`` ranks: every split of
    ``splits`` Megatron-Core accepts for the degrees (``job.pipeline_split``)."""
    if pp == 1 and schedule != "1f1b":  # one stage: every schedule is 1F1B
        return []
    if schedule in UNIT_SCHEDULES:
        try:
            check_unit_schedule(schedule, pp, m)
        except ConfigError:
            return []
        options = [UNIT_CHUNKS[schedule]]
    elif schedule != "interleaved":
        options = [1]
    elif pp == 1 or m % pp:
        return []
    else:
        options = list(range(2, MAX_CHUNKS + 1))
    return [(v, split) for v in options
            for split in feasible_splits(layers, pp, v, splits, mtp)]


def _fewest_block(job: Job, layout: Execution) -> Execution | None:
    """``layout`` with Megatron-Core's block recomputation of the fewest layers per chunk that
    fit (``job.compute.block_recompute``; memory falls as N grows), for a layout without
    recomputation that does not fit; None when no N below a whole chunk (``full``, searched
    on its own) fits or block recomputation is not priced for the job."""
    try:
        check_block(job.spec, replace(layout, recompute="block:1"))
        spans = layout.stage_layers(job.spec.layers, job.spec.mtp_layers)
    except ConfigError:
        return None
    low, high = 1, max(len(span) for span in spans) - 1
    if high < low or not _fits(job, replace(layout, recompute=f"block:{high}")):
        return None
    while low < high:
        middle = (low + high) // 2
        if _fits(job, replace(layout, recompute=f"block:{middle}")):
            high = middle
        else:
            low = middle + 1
    return replace(layout, recompute=f"block:{low}")


def _fits(job: Job, layout: Execution) -> bool:
    """Whether ``layout``'s busiest GPU fits (``evaluate.memory_fits``; asked in bound order,
    so a layout past the search's cut never needs the memory model)."""
    try:
        return memory_fits(job, layout, layout_memory(job, layout))
    except ConfigError:
        return False


def search(job: Job, choice: Execution, space: Space,
           ranking: Ranking = POINT) -> SearchResult:
    """The fastest layout of ``space`` (module docstring), ranked by ``ranking``
    (``job.ranking``: the predicted iteration, or its interval's upper end), each run with
    ``choice``'s run settings (the space's data-parallel policy where it names one);
    ConfigError when none fits."""
    if space.dp_policy is not None:
        choice = choice.with_run(dp_policy=space.dp_policy)
    check_run(job, choice.run)
    ranked = []
    candidates = 0
    for layout in layouts(job, choice, space):
        candidates += 1
        try:  # a layout the model or the network cannot express (groups off the dimensions)
            check_layout(job, layout)
            times, _, _ = pipeline_times(job, layout)
        except ConfigError:
            continue
        ranked.append((ranking.order(job, layout, _bound(times)), layout))
    ranked.sort(key=lambda item: (item[0], item[1].label()))
    plain = replace(choice.run, dp_policy="none")
    blocks = space.given_core_options and "recompute" not in choice.fixed()
    best: list[JobResult] = []
    evaluated = 0
    for order, layout in ranked:
        if len(best) >= SHORTLIST and order >= ranking.key(job, best[SHORTLIST - 1]):
            break
        if not _fits(job, layout):
            partial = (_fewest_block(job, layout) if blocks and layout.recompute == "none"
                       else None)
            if partial is None:
                continue
            layout = partial  # its bound is at least the layout's: the order still holds
        best.append(evaluate(job, replace(layout, run=plain)))
        evaluated += 1
        best.sort(key=lambda r: (*ranking.key(job, r), r.layout.label()))
        best = best[:SHORTLIST]
    if not best:
        given = " ".join(f"--{name.replace('_', '-')} {value}"
                         for name, value in choice.fixed().items())
        raise ConfigError(f"{space.name}: no layout of {job.spec.name} runs on (or fits) "
                          f"{job.cluster.num_gpus} GPUs of {job.cluster.memory / 2**30:.0f} "
                          f"GiB with {given}; fix fewer options or add GPUs")
    shortlist = sorted((evaluate(job, replace(r.layout, run=choice.run)) for r in best),
                       key=lambda r: (*ranking.key(job, r), r.layout.label()))
    refined = [(evaluate(job, r.layout, fast=False), r) for r in shortlist[:REFINE]]
    simulated, winner = min(refined, key=lambda pair: (*ranking.key(job, pair[0]),
                                                       pair[1].layout.label()))
    return SearchResult(space.name, winner, evaluated, candidates, simulated.iteration_s,
                        tuple(shortlist))

