"""Find the fastest layout of a job, for dlsched and for each baseline in its own space.

Every space is enumerated over the degrees a layout may take (``space``): TP up to the GPUs of
the first network dimension and dividing the heads, PP dividing the layers, DP the rest, the
microbatch sizes 1-8 that divide each replica's batch, the schedules with chunks dividing each
rank's layers, recomputation, sequence parallelism and ZeRO stage — minus what the user fixed
(``LayoutChoice``) or the space leaves out. Layouts that do not fit GPU memory are dropped
first (closed form, ``job.memory``), the rest sorted by a lower bound on their pipeline
(``evaluate._bound``: the busiest rank's compute and the forwards before and backwards after
it), and evaluated fast in that order, with the gradients reduced after the backward, until the
bound of the next passes the ``SHORTLIST``-th best time found (overlapping the reduction only
shortens an iteration, so no layout left out could beat them without it); the shortlist is
evaluated again with the job's data-parallel policy, and its ``REFINE`` best by the pipeline
simulator: the fastest of those wins (its simulated time reported beside the fast one).

Spaces (``SPACES``): ``megatron`` is Megatron-LM SC21's practice (TP within a node, 1F1B or
interleaved 1F1B, full recomputation, no sequence parallelism, gradients all-reduced after the
backward), ``megatron-sp`` Korthikanti et al. 2022's (selective recomputation and sequence
parallelism added, the distributed optimizer = ZeRO 1), ``fsdp`` ZeRO 3 / FSDP data
parallelism without a pipeline, and ``dlsched`` every layout with the data-parallel policy the
job names (dlsched's own by default).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from dlsched.errors import ConfigError
from dlsched.job.evaluate import Job, JobResult, _bound, check_layout, evaluate, pipeline_times
from dlsched.job.layout import RECOMPUTE, SCHEDULES, ZERO_STAGES, Layout, LayoutChoice
from dlsched.job.memory import peak_memory

MICROBATCH_SIZES = (1, 2, 4, 8)
MAX_CHUNKS = 8
SHORTLIST = 6
REFINE = 2


@dataclass(frozen=True)
class Space:
    """What a planner's search may choose (None: anything)."""

    name: str
    schedules: tuple[str, ...] = SCHEDULES
    recompute: tuple[str, ...] = RECOMPUTE
    sequence_parallel: tuple[bool, ...] = (False, True)
    zero: tuple[int, ...] = ZERO_STAGES
    max_pp: int | None = None
    dp_policy: str | None = None


SPACES = {
    "megatron": Space("megatron", ("1f1b", "interleaved"), ("full",), (False,), (0,),
                      dp_policy="none"),
    "megatron-sp": Space("megatron-sp", ("1f1b", "interleaved"), ("selective", "full"),
                         (True,), (1,), dp_policy="none"),
    "fsdp": Space("fsdp", ("1f1b",), RECOMPUTE, (False, True), (3,), max_pp=1,
                  dp_policy="none"),
    "dlsched": Space("dlsched"),
}
BASELINES = ("megatron", "megatron-sp", "fsdp")


@dataclass(frozen=True)
class SearchResult:
    """The best layout of a space, the layouts evaluated, pruned and refused, and the
    simulated time of the winner."""

    space: str
    best: JobResult
    evaluated: int
    candidates: int
    simulated_s: float


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def layouts(job: Job, choice: LayoutChoice, space: Space) -> Iterator[Layout]:
    """Every layout of ``space`` that keeps ``choice``'s fixed fields (module docstring)."""
    spec, gpus = job.spec, job.cluster.num_gpus
    inner = job.cluster.topology.dims[0].size
    fixed = choice.fixed()
    tps = [t for t in _divisors(min(inner, gpus)) if spec.heads % t == 0]
    for tp in [fixed["tp"]] if "tp" in fixed else tps:
        for pp in ([fixed["pp"]] if "pp" in fixed else _divisors(spec.layers)):
            if gpus % (tp * pp) or (space.max_pp and pp > space.max_pp):
                continue
            dp = gpus // (tp * pp)
            yield from _inner(choice, space, tp, pp, dp, spec.layers)


def _inner(choice: LayoutChoice, space: Space, tp: int, pp: int, dp: int,
           layers: int) -> Iterator[Layout]:
    fixed = choice.fixed()
    sizes = [fixed["microbatch_size"]] if "microbatch_size" in fixed else MICROBATCH_SIZES
    for mb in sizes:
        if choice.global_batch % (mb * dp):
            continue
        m = choice.global_batch // (mb * dp)
        for schedule in space.schedules:
            for chunks in _chunks(schedule, layers // pp if layers % pp == 0 else 0, m, pp):
                for recompute in space.recompute:
                    for sp in space.sequence_parallel if tp > 1 else (False,):
                        for zero in space.zero if dp > 1 else (0,):
                            layout = Layout(tp, pp, dp, mb, choice.global_batch, chunks,
                                            schedule, recompute, sp, zero)
                            if choice.admits(layout):
                                yield layout


def _chunks(schedule: str, per_rank: int, m: int, pp: int) -> list[int]:
    if per_rank == 0 or (pp == 1 and schedule != "1f1b"):  # one stage: every schedule is 1F1B
        return []
    if schedule != "interleaved":
        return [1]
    if pp == 1 or m % pp:
        return []
    return [v for v in range(2, MAX_CHUNKS + 1) if per_rank % v == 0]


def search(job: Job, choice: LayoutChoice, space: Space) -> SearchResult:
    """The fastest layout of ``space`` (module docstring); ConfigError when none fits."""
    if space.dp_policy is not None:
        job = replace(job, dp_policy=space.dp_policy)
    usable = job.cluster.memory
    ranked = []
    candidates = 0
    for layout in layouts(job, choice, space):
        candidates += 1
        try:  # a layout the model or the network cannot express (groups off the dimensions)
            check_layout(job, layout)
            if not peak_memory(job.spec, layout, job.precision).fits(usable):
                continue
            times, _, _ = pipeline_times(job, layout)
        except ConfigError:
            continue
        ranked.append((_bound(times), layout))
    if not ranked:
        given = " ".join(f"--{name.replace('_', '-')} {value}"
                         for name, value in choice.fixed().items())
        raise ConfigError(f"{space.name}: no layout of {job.spec.name} runs on (or fits) "
                          f"{job.cluster.num_gpus} GPUs of {usable / 2**30:.0f} GiB with "
                          f"{given}; fix fewer options or add GPUs")
    ranked.sort(key=lambda item: (item[0], item[1].label()))
    plain = replace(job, dp_policy="none")
    best: list[JobResult] = []
    evaluated = 0
    for bound, layout in ranked:
        if len(best) >= SHORTLIST and bound >= best[SHORTLIST - 1].iteration_s:
            break
        best.append(evaluate(plain, layout))
        evaluated += 1
        best.sort(key=lambda r: (r.iteration_s, r.layout.label()))
        best = best[:SHORTLIST]
    overlapped = sorted((evaluate(job, r.layout) for r in best),
                        key=lambda r: (r.iteration_s, r.layout.label()))[:REFINE]
    refined = [(evaluate(job, r.layout, fast=False), r) for r in overlapped]
    simulated, winner = min(refined, key=lambda pair: (pair[0].iteration_s,
                                                       pair[1].layout.label()))
    return SearchResult(space.name, winner, evaluated, candidates, simulated.iteration_s)

