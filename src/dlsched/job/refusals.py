"""Mistakes in a ``dlsched plan`` scenario, each refused with its own cause before any search.

A search that finds no layout can only say "no layout fits"; these checks name the field
that cannot hold instead (``ConfigError.field``; ``dlsched plan`` says its option;
``check_plan``, called first by ``job.api.plan``):

- ``--gpus`` on a node preset: at least 2 (one GPU has no network to price), at most one node
  or whole nodes, and at most ``MAX_NPUS_PER_DIM`` nodes (the nodes form one network
  dimension, ``validation.MAX_NPUS_PER_DIM``): 32,768 GPUs of 8-GPU nodes;
- the degrees given: TP x CP x PP x DP equal to the GPUs (those given dividing them), TP
  dividing the attention heads and the KV heads (each TP rank holds whole heads: Megatron-
  Core's ``divide(num_query_groups, tp)``), CP with 2 x CP dividing the sequence (Megatron's
  load-balanced split), PP that some pipeline split takes, EP only on a mixture of experts and
  dividing its experts, expert TP dividing the experts' FFN width, the global batch a multiple
  of microbatch x DP;
- options that would be silently ignored: ``--expert-tp`` on a dense model,
  ``--tp-comm-overlap`` without sequence parallelism (Megatron-Core overlaps the TP
  collectives of sequence parallelism only), ``--overlap-param-gather`` with ZeRO 0 or 3
  (ZeRO 0 gathers no weights; ZeRO 3 gathers each layer's before its forward anyway, priced
  as such: ``job.evaluation.evaluate``), ``--sharding fsdp2|fsdp2-split`` with a ZeRO stage
  other than 3 (it says whose ZeRO 3 is priced), ``--moe-a2a-overlap`` on a dense model;
- ``--moe-a2a-overlap`` with a layout field given that Megatron-Core refuses it for (EP 1, a
  schedule other than 1F1B without a pipeline or interleaved, full or ``moe`` recomputation:
  ``job.evaluation.a2a_overlap.check_a2a_overlap``, the evaluator's check).

``default_notes`` names the defaults behind the rows (printed as notes with them).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dlsched.errors import ConfigError
from dlsched.hardware.gpu import get_gpu
from dlsched.job.cluster import (
    DEFAULT_CLUSTER,
    NODE_PRESETS,
    is_system_file,
    load_cluster,
    node_of_gpu,
)
from dlsched.job.communication.context_parallel import check_cp_sequence
from dlsched.job.compute.moe_costs import check_expert_tp
from dlsched.job.evaluation.a2a_overlap import check_a2a_overlap
from dlsched.job.evaluation.pipeline_split import feasible_splits
from dlsched.job.evaluation.unit_walk import UNIT_SCHEDULES, check_unit_schedule
from dlsched.job.model_spec import Model
from dlsched.job.search import MICROBATCH_SIZES
from dlsched.validation import MAX_MICROBATCHES, MAX_NPUS_PER_DIM

if TYPE_CHECKING:
    from dlsched.job.cluster import System
    from dlsched.job.scenario import PlanScenario

DEGREES = ("tp", "cp", "pp", "dp")


def check_plan(scenario: PlanScenario, spec: Model) -> None:
    """Refuse the scenario's first mistake (module docstring) with a one-line ConfigError of
    the field at fault (``ConfigError.field``: ``tp``, ``global_batch``; degrees given
    together ``tp/pp``; ``dlsched plan`` names the options) saying what is accepted. An
    unknown GPU first: without it the node preset's own checks would speak of a GPU count for
    a GPU that does not exist."""
    if scenario.gpu is not None:
        try:
            get_gpu(scenario.gpu)
        except ConfigError as error:
            raise error.renamed("gpu") from None
    check_gpus(scenario.cluster, scenario.gpus)
    gpus = int(scenario.gpus or 0) if scenario.cluster in NODE_PRESETS else load_cluster(
        scenario.cluster, scenario.gpus, scenario.gpu).num_gpus
    _check_degrees(scenario, spec, gpus)
    _check_heads(scenario.tp, spec)
    if scenario.cp is not None:
        check_cp_sequence(spec.seq, scenario.cp)
    _check_pipeline(scenario.pp, scenario.chunks, spec)
    _check_experts(scenario, spec)
    _check_batch(scenario, gpus)
    _check_schedule(scenario)
    _check_ignored(scenario)
    _check_a2a_overlap(scenario, spec)


def check_gpus(cluster: str, gpus: int | None) -> None:
    """``gpus`` on node preset ``cluster``: needed, at least 2, at most one node or whole
    nodes, at most ``MAX_NPUS_PER_DIM`` nodes (ConfigError of field ``gpus`` otherwise)."""
    if cluster not in NODE_PRESETS:
        return
    per_node = NODE_PRESETS[cluster].gpus
    accepted = (f"accepted: 2 to {per_node}, or a multiple of {per_node} up to "
                f"{per_node * MAX_NPUS_PER_DIM:,} ({MAX_NPUS_PER_DIM:,} {cluster} nodes, the "
                "most one network dimension holds)")
    if gpus is None:
        raise ConfigError(f"needed with the node preset {cluster!r}; {accepted}", "gpus")
    if gpus < 2:
        raise ConfigError(f"{gpus} GPU leaves no parallel layout and no network to price; "
                          f"{accepted}", "gpus")
    if gpus > per_node and gpus % per_node:
        raise ConfigError(f"{gpus} is more than one {cluster} node and not whole nodes of "
                          f"{per_node}; {accepted}", "gpus")
    if gpus > per_node * MAX_NPUS_PER_DIM:
        raise ConfigError(f"{gpus:,} is {gpus // per_node:,} nodes, more than the "
                          f"{MAX_NPUS_PER_DIM:,} one network dimension holds; {accepted}",
                          "gpus")


def _check_degrees(scenario: PlanScenario, spec: Model, gpus: int) -> None:
    """TP x CP x PP x DP: the GPUs when all four are given, a divisor of them otherwise."""
    given = {name: getattr(scenario, name) for name in DEGREES
             if getattr(scenario, name) is not None}
    if not given:
        return
    product = math.prod(given.values())
    names = " x ".join(name.upper() for name in given)
    values = " x ".join(str(value) for value in given.values())
    fields = "/".join(given)
    if len(given) == 1:
        names = values = ""
    else:
        names, values = f"{names} = ", f"{values} = "
    if len(given) == len(DEGREES) and product != gpus:
        raise ConfigError(f"{names}{values}{product:,} GPUs, not the {gpus:,} of --gpus; "
                          f"accepted: degrees whose product is {gpus:,}", fields)
    if gpus % product:
        raise ConfigError(f"{names}{values}{product:,} does not divide the {gpus:,} GPUs of "
                          f"--gpus; accepted: degrees whose product divides {gpus:,}", fields)


def _check_heads(tp: int | None, spec: Model) -> None:
    """TP dividing the attention heads and the KV heads."""
    if tp is None or (spec.heads % tp == 0 and spec.kv_heads % tp == 0):
        return
    accepted = [t for t in range(1, spec.kv_heads + 1)
                if spec.heads % t == 0 and spec.kv_heads % t == 0]
    raise ConfigError(f"{tp} does not divide {spec.name}'s {spec.heads} attention heads and "
                      f"{spec.kv_heads} KV heads (each TP rank holds whole heads); accepted: "
                      f"{', '.join(map(str, accepted))}", "tp")


def _check_pipeline(pp: int | None, chunks: int | None, spec: Model) -> None:
    """PP (x chunks) that some pipeline split of the layers takes (``job.pipeline_split``)."""
    if pp is None:
        return
    options = [chunks] if chunks is not None else range(1, spec.layers + 1)
    if not any(feasible_splits(spec.layers, pp, v, mtp=spec.mtp_layers) for v in options):
        per = f"PP x chunks = {pp} x {chunks}" if chunks is not None else f"PP {pp}"
        mtp = (f" (or {spec.layers + 2 + spec.mtp_layers}: the loss and its MTP modules "
               "counted)") if spec.mtp_layers else ""
        raise ConfigError(f"{per} splits none of {spec.name}'s {spec.layers} layers evenly, "
                          "with or without the embedding and the loss counted as layers "
                          f"(--pipeline-split); accepted: a PP (x chunks) dividing "
                          f"{spec.layers}, {spec.layers + 1} or {spec.layers + 2}{mtp}", "pp")


def _check_experts(scenario: PlanScenario, spec: Model) -> None:
    """EP and expert TP only on a mixture of experts; EP dividing its experts."""
    if not spec.experts:
        for name, value, default in (("ep", scenario.ep, 1), ("expert_tp", scenario.expert_tp,
                                                               None)):
            if value is not None and value != default:
                raise ConfigError(f"{value} on {spec.name}, a dense model (no experts to "
                                  "place: it would be ignored); accepted: an MoE model "
                                  "(mixtral-8x7b, ...) or leave it out", name)
        return
    if scenario.ep is not None and spec.experts % scenario.ep:
        accepted = [e for e in range(1, spec.experts + 1) if spec.experts % e == 0]
        raise ConfigError(f"{scenario.ep} does not divide {spec.name}'s {spec.experts} "
                          f"experts; accepted: {', '.join(map(str, accepted))}", "ep")
    if scenario.expert_tp is not None:
        check_expert_tp(spec, scenario.expert_tp)


def _check_batch(scenario: PlanScenario, gpus: int) -> None:
    """The global batch a multiple of the microbatch size x DP given, and at most
    ``MAX_MICROBATCHES`` microbatches per replica (the pipeline simulator's limit) at the
    largest microbatch size x DP given or searched (``search.MICROBATCH_SIZES``' largest; DP: the
    GPUs)."""
    most = (scenario.microbatch_size or max(MICROBATCH_SIZES)) * (scenario.dp or gpus)
    if scenario.global_batch > MAX_MICROBATCHES * most:
        raise ConfigError(f"{scenario.global_batch:,} sequences are more than "
                          f"{MAX_MICROBATCHES:,} microbatches per replica at microbatch size x "
                          f"DP = {most:,}, the most this job takes; accepted: at most "
                          f"{MAX_MICROBATCHES * most:,} (or a larger --microbatch-size/--dp)",
                          "global_batch")
    step = (scenario.microbatch_size or 1) * (scenario.dp or 1)
    if scenario.global_batch % step:
        given = " x ".join(f"--{name.replace('_', '-')} {getattr(scenario, name)}"
                           for name in ("microbatch_size", "dp")
                           if getattr(scenario, name) is not None)
        raise ConfigError(f"{scenario.global_batch} is not a multiple of {given} = {step} "
                          f"(every replica runs whole microbatches); accepted: a multiple of "
                          f"{step}", "global_batch")


def _check_schedule(scenario: PlanScenario) -> None:
    """ZB-V, DualPipe and DualPipeV (``job.unit_walk``): their chunks per rank, their pipeline
    ranks and, when the degrees given fix them, their microbatches per replica; the
    interleaved schedule with more than one chunk per rank, every other (of one stage per rank)
    with one (``Execution``'s rule, refused per layout in the search)."""
    schedule, chunks = scenario.schedule, scenario.chunks
    if schedule not in (None, *UNIT_SCHEDULES) and chunks is not None and \
            (schedule == "interleaved") != (chunks > 1):
        accepted = "2 or more" if schedule == "interleaved" else "1 (or --schedule interleaved)"
        raise ConfigError(f"{chunks} chunk(s) per rank with --schedule {schedule}, which runs "
                          + ("several" if schedule == "interleaved" else "one")
                          + f" per rank; accepted: {accepted}", "chunks")
    if scenario.schedule not in UNIT_SCHEDULES or scenario.pp is None:
        return
    check_unit_schedule(scenario.schedule, scenario.pp, 2 * scenario.pp, scenario.chunks)
    if scenario.dp is None or scenario.microbatch_size is None:
        return
    m = scenario.global_batch // (scenario.microbatch_size * scenario.dp)
    try:
        check_unit_schedule(scenario.schedule, scenario.pp, m)
    except ConfigError as error:
        raise ConfigError(f"{scenario.global_batch} sequences in microbatches of "
                          f"{scenario.microbatch_size} over DP {scenario.dp} are {m} per "
                          f"replica; {str(error).partition(': ')[2]}", "global_batch") from None


def _check_ignored(scenario: PlanScenario) -> None:
    """Overlap options that the layout given leaves nothing to do."""
    if scenario.tp_comm_overlap and (scenario.sequence_parallel is False or scenario.tp == 1):
        raise ConfigError("overlaps the TP collectives of sequence parallelism (Megatron-Core's "
                          "userbuffers), which this layout does not use (--no-sequence-parallel "
                          "or --tp 1): it would be ignored; accepted: with --sequence-parallel "
                          "and TP > 1, or left out", "tp_comm_overlap")
    if scenario.overlap_param_gather and scenario.zero in (0, 3):
        raise ConfigError(f"overlaps ZeRO 1-2's weight all-gather with the next forward; with "
                          f"--zero {scenario.zero} it would be ignored (ZeRO 0 gathers no "
                          "weights, ZeRO 3 gathers each layer's before its forward); accepted: "
                          "with --zero 1 or 2, or left out", "overlap_param_gather")
    if scenario.sharding != "zero" and scenario.zero not in (None, 3):
        raise ConfigError(f"{scenario.sharding} prices ZeRO 3 as PyTorch's FSDP2; with --zero "
                          f"{scenario.zero} it would be ignored; accepted: with --zero 3 (or "
                          "--zero left out: searched), or --sharding zero", "sharding")


def default_notes(scenario: PlanScenario, cluster: System) -> list[str]:
    """The defaults behind the rows: the global batch and the attention kernel when they are
    the schema's defaults (given or not: the command line cannot tell), and the GPU of a
    topology cluster when ``--gpu`` is not given."""
    fields = type(scenario).model_fields
    notes = []
    if scenario.global_batch == fields["global_batch"].default:
        notes.append(f"global batch: {scenario.global_batch} sequences, the default "
                     "(--global-batch)")
    if scenario.attention == fields["attention"].default:
        notes.append(f"attention core: {scenario.attention}, the default kernel (--attention "
                     "flash|fused|unfused)")
    if scenario.gpu is not None and scenario.cluster == node_of_gpu(scenario.gpu) != \
            DEFAULT_CLUSTER:
        notes.append(f"cluster: {scenario.cluster}, the node preset of --gpu {scenario.gpu} "
                     "when no --cluster is given (--cluster)")
    if scenario.cluster not in NODE_PRESETS and scenario.gpu is None and \
            not is_system_file(scenario.cluster):  # a system file names its GPU
        notes.append(f"GPU: {cluster.gpu}, the default for a topology cluster, which names no "
                     "GPU (--gpu)")
    return notes


def _check_a2a_overlap(scenario: PlanScenario, spec: Model) -> None:
    """``--moe-a2a-overlap`` on a dense model (nothing to overlap: it would be ignored), or with
    a layout field given that the evaluator refuses it for
    (``job.evaluation.a2a_overlap.check_a2a_overlap``; a field left out stands for one the
    search may pick that allows it)."""
    if not scenario.moe_a2a_overlap:
        return
    if not spec.experts:
        raise ConfigError(f"on {spec.name}, a dense model (no expert All-to-All to overlap: it "
                          "would be ignored); accepted: an MoE model (mixtral-8x7b, ...) or "
                          "leave it out", "moe_a2a_overlap")
    schedule = scenario.schedule or ("1f1b" if scenario.pp in (None, 1) else "interleaved")
    check_a2a_overlap(schedule, scenario.pp or 1, scenario.ep or 2,
                      scenario.recompute or "none")
