"""Tensor-parallel collectives overlapped with their GEMMs (Megatron-Core ``--tp-comm-overlap``).

Transformer Engine's userbuffers run each sequence-parallel collective of a layer beside the GEMM
it feeds or drains, by one of three methods (named as NeMo's TP-overlap configurations name
them: ``RingExchangeOverlapCfg``, ``PipelineOverlapCfg``, ``BulkOverlapCfg``):

* ``ring``: the all-gather feeding a GEMM is a ring of point-to-point copies (copy engines), the
  GEMM split into ``t`` pieces, each run while the next piece arrives: the collective exposes
  ``max(0, collective - GEMM)`` and takes no SMs;
* ``pipeline``: the GEMM draining into a reduce-scatter is split into ``k`` chunks; the
  reduce-scatter of chunk ``i`` runs beside the GEMM of chunk ``i + 1`` on ``n`` SMs reserved
  for it, so the GEMM runs on ``S - n`` of the GPU's ``S`` SMs (``set_sm_margin``): a two-stage
  flow of ``k`` equal chunks, the last reduce-scatter chunk exposed;
* ``bulk``: a whole collective beside a whole independent GEMM of the backward (the input's
  all-gather beside the data-gradient GEMM, the data gradient's reduce-scatter beside the
  weight-gradient GEMM), its kernel on ``n`` SMs, the GEMM told to use the other ``S - n``
  (``set_sm_margin``, Transformer Engine's default for bulk overlap): ``max(GEMM x S / (S - n),
  collective)``;
* ``bulk-all-sms``: the same without the margin (NeMo's configurations: ``set_sm_margin=False``),
  so the GEMM is launched for all ``S`` SMs while the collective's kernel holds ``n`` of them.
  Transformer Engine launches the collective's kernel first and makes the GEMM wait for that
  launch (``CommOverlapBase::bulk_overlap``, transformer_engine/common/comm_gemm_overlap/
  comm_gemm_overlap.cpp at v2.1: ``_math_sms`` = all SMs when ``set_sm_margin`` is off). Hopper's
  cuBLAS GEMMs are persistent kernels, one thread block per SM each working through its share
  of the output tiles (PyTorch issue #143988 and PR #144974, 2024-12 / 2025-01, measured on
  H100: 132 blocks; with NCCL holding some SMs the blocks that find no free SM run as a second
  wave and the matmul takes about twice as long). So the blocks that cannot start wait for the
  collective's SMs (or for the first wave to end): the GEMM ends at ``GEMM + min(collective,
  GEMM)``, the pair at ``max(collective, GEMM + min(collective, GEMM))``: the collective is
  exposed in full while it is shorter than the GEMM.

Methods and SM counts are those of NeMo's H100 userbuffers configurations
(``nemo/collections/llm/recipes/tp_overlap_configs/userbuffers.py``,
``userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192``: the proj and FC2 reduce-scatters pipelined
on 24 and 16 SMs in 4 splits, the QKV and FC1 backward bulk on 4 / 24 and 2 / 4 SMs, the rest
ring exchanges; the bulk ones with ``set_sm_margin=False``: ``bulk-all-sms``), used for every
model (one setting, not tuned per model; the 405B configuration
``userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192`` differs in SM counts, which
``bulk-all-sms`` does not depend on, and in its aggregated ring exchanges, whose first chunk
exchange is not overlapped: not priced). The input's
re-gather for the weight gradient (sequence parallelism saves the sharded input) is priced only
here: Megatron's blocking path overlaps it with the data-gradient GEMM too
(``job.layer_costs``).

**FP8** (Transformer Engine's recipes, ``fp8_recipe`` ``delayed``, ``current`` or ``mxfp8``):
the GEMMs beside the collectives are the FP8 ones (``models.pricing.product_seconds`` on the
GPU in fp8, the casts not counted: they are kernels of their own before the GEMM); every
all-gather's userbuffer holds FP8 (``initialize_ub``, transformer_engine/pytorch/module/base.py
at v2.1: "AllGather buffers use fp8 when using fp8 recipe", ``layers_all_gather_overlap``: the
QKV and FC1 forward and data-gradient gathers, the projection's and FC2's output-gradient
gathers), 1 byte per element (MXFP8 with its E8M0 scale per 32, ``job.compute.fp8``) against 2;
and the forward's two reduce-scatters are ring exchanges (``ring-rs``), as every FP8
configuration of Megatron-Bridge sets them (src/megatron/bridge/training/comm_overlap.py at
7af9601 and df0289c: ``userbuffers_fp8_h100_h8192_tp4``, ``..._h100_h16384_tp8_cp2``,
``..._b200_h8192_tp2``, ``..._b200_h16384_tp4_cp2``: proj_fprop and fc2_fprop
``RingExchangeOverlapCfg(num_sm=1, set_sm_margin=True)``, ``fp8_buf`` False: bf16 buffers).
Transformer Engine runs one (``CommOverlapP2PBase::split_overlap_rs``, v2.1) as ``t`` GEMM
chunks on ``S - 1`` SMs, the partial result for each other rank sent to it by copy engine as
soon as its chunk ends (the own chunk last), then one kernel summing the ``t`` received partial
chunks (reading the whole output, writing its ``1/t``, at the memory rate). The weight-gradient
GEMMs' bulk reduce-scatters stay bf16 (no list holds them).
"""

from __future__ import annotations

from dataclasses import replace

from dlsched.hardware import Topology
from dlsched.job.communication.collective_costs import curve
from dlsched.job.compute.fp8 import MX_BLOCK, TE_RECIPES
from dlsched.models.compute import CalibratedCompute
from dlsched.models.pricing import product_seconds
from dlsched.models.zoo import TransformerModel

PIPELINE_SPLITS = 4
# (pass, collective, the GEMM it runs beside, method, SMs its kernel takes); pass ``dgrad`` and
# ``wgrad`` are the backward's data- and weight-gradient GEMMs (half its time each)
OVERLAPS = (
    ("forward", "all-gather", "h.0.attn.c_attn", "ring", 0),
    ("forward", "reduce-scatter", "h.0.attn.c_proj", "pipeline", 24),
    ("forward", "all-gather", "h.0.mlp.c_fc", "ring", 0),
    ("forward", "reduce-scatter", "h.0.mlp.c_proj", "pipeline", 16),
    ("dgrad", "all-gather", "h.0.attn.c_proj", "ring", 0),
    ("dgrad", "all-gather", "h.0.mlp.c_proj", "ring", 0),
    ("dgrad", "all-gather", "h.0.attn.c_attn", "bulk-all-sms", 4),
    ("wgrad", "reduce-scatter", "h.0.attn.c_attn", "bulk-all-sms", 24),
    ("dgrad", "all-gather", "h.0.mlp.c_fc", "bulk-all-sms", 2),
    ("wgrad", "reduce-scatter", "h.0.mlp.c_fc", "bulk-all-sms", 4),
)


def ring_reduce_scatter(collective: float, gemm: float, sms: int, tp: int,
                        reduction: float) -> float:
    """Seconds a reduce-scatter of ``collective`` seconds (as a ring over ``tp`` ranks) adds
    to a ``gemm`` it drains by Transformer Engine's ring exchange (module docstring, FP8):
    ``tp`` chunks on ``sms - 1`` SMs, each chunk's partial result sent (one ring step,
    ``collective / (tp - 1)``) once its chunk ends and the previous send is done, the own
    chunk last, then the ``reduction`` kernel (seconds)."""
    chunk = gemm * sms / (sms - 1) / tp
    step = collective / (tp - 1)
    sent = 0.0
    for ended in range(1, tp):  # the partial result of chunk ``ended`` goes to its rank
        sent = max(sent, ended * chunk) + step
    return max(sent, tp * chunk) + reduction - gemm


def exposed_seconds(method: str, collective: float, gemm: float, sms: int,
                    comm_sms: int) -> float:
    """Seconds ``collective`` adds to a ``gemm`` beside it by ``method`` on a GPU of ``sms``
    SMs, ``comm_sms`` of them taken by the collective's kernel (module docstring)."""
    slowed = gemm * sms / (sms - comm_sms)
    if method == "ring":
        return max(0.0, collective - gemm)
    if method == "bulk-all-sms":  # persistent GEMM blocks wait for the collective's SMs
        return max(collective, gemm + min(collective, gemm)) - gemm
    if method == "bulk":
        return max(slowed, collective) - gemm
    k = PIPELINE_SPLITS
    end = slowed / k + (k - 1) * max(slowed, collective) / k + collective / k
    return end - gemm


def buffer_bytes(collective: str, fp8_recipe: str | None) -> float:
    """Bytes per element of a ``collective``'s userbuffer (module docstring, FP8): 2 (bf16)
    but an all-gather's under a Transformer Engine FP8 recipe."""
    if fp8_recipe not in TE_RECIPES or collective == "reduce-scatter":
        return 2.0
    return 1 + 1 / MX_BLOCK if fp8_recipe == "mxfp8" else 1.0


def overlapped_tp(model: TransformerModel, compute: CalibratedCompute, microbatch_size: int,
                  message: float, tp_group: Topology | None, policy: str,
                  halves: tuple[str, ...] = ("attn", "mlp"),
                  fp8_recipe: str | None = None) -> tuple[float, float]:
    """Exposed seconds of one layer's sequence-parallel collectives in the forward and the
    backward (``OVERLAPS``), each collective of the ``message`` bytes of the bf16 activation
    on ``tp_group`` (fewer for an FP8 buffer, ``buffer_bytes``); ``halves`` the layer's parts
    whose collectives are counted (an MoE layer: the attention's only); under a Transformer
    Engine ``fp8_recipe`` the GEMMs in FP8 and the forward's reduce-scatters by ring exchange
    (module docstring)."""
    gemms = {op.label: op for layer in model.layers for op in layer.ops if op.kind == "gemm"}
    sms = compute.gpu.spec.sms
    fp8 = replace(compute, precision="fp8", autocast=False) if fp8_recipe in TE_RECIPES \
        else None
    tp = tp_group.num_npus if tp_group is not None else 1

    def gemm_seconds(label: str, backward: bool) -> float:
        if fp8 is None:
            return compute.op_time(gemms[label], microbatch_size, backward=backward)
        return product_seconds(fp8, gemms[label], microbatch_size, backward)

    forward = backward = 0.0
    for phase, collective, label, method, comm_sms in OVERLAPS:
        if not any(f".{half}." in label for half in halves):
            continue
        size = message * buffer_bytes(collective, fp8_recipe) / 2
        seconds = curve(tp_group, collective, policy).seconds(size)
        if phase == "forward" and collective == "reduce-scatter" and fp8 is not None \
                and tp > 1:  # Megatron-Bridge's FP8 configurations: a ring exchange
            reduction = message * (1 + 1 / tp) / compute.gpu.memory_rate
            forward += ring_reduce_scatter(seconds, gemm_seconds(label, False), sms, tp,
                                           reduction)
        elif phase == "forward":
            forward += exposed_seconds(method, seconds, gemm_seconds(label, False), sms,
                                       comm_sms)
        else:
            gemm = gemm_seconds(label, True) / 2
            backward += exposed_seconds(method, seconds, gemm, sms, comm_sms)
    return forward, backward
