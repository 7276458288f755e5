"""NVFP4 linears (``job.compute.nvfp4``, ``--fp8-recipe nvfp4``): one Llama 3 8B layer's FC1
cast bytes and FP4 GEMM seconds computed by hand on a GB300, the sequence-parallel shard cast,
gathers and amax reductions, the memory it keeps, and the refusals naming the field."""

from __future__ import annotations

from dataclasses import replace

import pytest
from llama3_8b import L8

from dlsched.config import bundled_presets
from dlsched.errors import ConfigError
from dlsched.job.compute.fp8 import (
    MXFP8_GPUS,
    amax_reductions,
    cast_bytes,
    cast_kernels,
    check_fp8,
    fp8_gemm_seconds,
    fp8_linear_work,
    fp8_weight_bytes,
    tp_gather_fraction,
)
from dlsched.job.compute.layer_costs import decoder_model, gpu_compute
from dlsched.job.exports.framework_flags import megatron_fp8_args
from dlsched.job.memory.te_fp8_stash import saved_bytes
from dlsched.job.run_settings import RunSettings
from dlsched.models.compute import calibrated
from dlsched.models.kernels import gemm_utilization

B = 2  # microbatch size
TOKENS = B * 8192
NV = 0.5 + 1 / 16  # bytes per NVFP4 element: E2M1 and one E4M3 scale per 16


def _fc1():
    model = decoder_model(L8, 1)
    return next(op for layer in model.layers for op in layer.ops
                if op.label == "h.0.mlp.c_fc")


def test_fc1_cast_bytes_by_hand() -> None:
    """Forward: the input's Hadamard amax pass (read 2), its rowwise cast (read 2, write
    0.5625) and its RHT columnwise cast (read 2, write 0.5625): 7.125 bytes per element in 3
    kernels; the weight's amax (2) and one 2D quantize-transpose (2 + 2 x 0.5625): 5.125 bytes
    once per iteration's 8 microbatches in 3 launches (amax, its copy, the cast). Backward: the
    output gradient as the input, 7.125 bytes."""
    op = _fc1()
    x, w, g = TOKENS * 4096, 4096 * 28672, TOKENS * 28672
    assert cast_bytes(op, B, 1, "nvfp4", False, False, 8) == pytest.approx(
        (2 + 2 * (2 + NV)) * x + (2 + 2 + 2 * NV) * w / 8)
    assert cast_bytes(op, B, 1, "nvfp4", True, False, 8) == pytest.approx(7.125 * g)
    assert cast_kernels("nvfp4", False, False, 8) == pytest.approx(3 + 3 / 8)
    assert cast_kernels("nvfp4", True, False, 8) == 3


def test_fc1_forward_in_fp4_on_gb300_by_hand() -> None:
    """2 x 16384 x 28672 x 4096 FLOP at GB300's dense FP4 15,000 TFLOP/s x its FP4 fraction
    (0.4720, the FP8 one, assumed) x the tile utilization, plus the cast bytes at the memory
    rate; the same GEMMs in FP8 take 3x as long (peak.fp4 = 3 x peak.fp8 on Blackwell Ultra)."""
    op = _fc1()
    fp8 = replace(gpu_compute("gb300", "fp8"), precision="fp8", autocast=False)
    gpu = fp8.gpu
    flops = 2 * TOKENS * 28672 * 4096
    util = gemm_utilization(TOKENS, 28672, 4096, 1, gpu.spec.sms)
    gemm = flops / (15000e12 * 0.4720 * util)
    assert fp8_gemm_seconds(op, B, fp8, "nvfp4", False) == pytest.approx(gemm)
    assert fp8_gemm_seconds(op, B, fp8, "mxfp8", False) == pytest.approx(3 * gemm)
    moved = 7.125 * TOKENS * 4096 + 5.125 * 4096 * 28672 / 8
    work = fp8_linear_work(op, B, fp8, "nvfp4", False, False, 8)
    assert work.gpu_s == pytest.approx(gemm + moved / gpu.memory_rate)
    assert work.launches == pytest.approx(op.kernels + 3 + 3 / 8)


def test_fp4_gemm_operand_bytes_by_hand() -> None:
    """An FP4 GEMM bound by its bytes reads NVFP4 operands and writes bf16: a 1-token forward
    of FC1 reads 0.5625 x (4096 + 4096 x 28672) and writes 2 x 28672 bytes."""
    fc1 = _fc1()  # one token: its FLOP and elements scaled down from 8,192 tokens
    op = replace(fc1, shape=(1, 28672, 4096, 0), flops=fc1.flops / 8192,
                 elements=fc1.elements / 8192)
    fp4 = calibrated("gb300", "fp4")
    moved = NV * (4096 + 4096 * 28672) + 2 * 28672
    assert fp8_gemm_seconds(op, 1, replace(fp4, precision="fp8"), "nvfp4", False) \
        == pytest.approx(moved / fp4.gpu.memory_rate)


def test_sequence_parallel_shard_cast_gathers_and_amax() -> None:
    """TP 4 with SP: FC1's input is cast on its quarter (7.125 / 4 per gathered element) and
    gathered as NVFP4 (0.5625 of bf16's 2 bytes); two amax all-reduces a layer each way, as
    current scaling's; none without SP."""
    op = _fc1()
    x, w = TOKENS * 4096, 4096 * 28672 / 4
    assert cast_bytes(op, B, 4, "nvfp4", False, False, 1, sequence_parallel=True) == \
        pytest.approx(7.125 * x / 4 + 5.125 * w)
    assert tp_gather_fraction("nvfp4") == pytest.approx(NV / 2)
    assert amax_reductions("nvfp4", 4, True) == (2, 2)
    assert amax_reductions("nvfp4", 4, False) == (0, 0)


def test_memory_kept() -> None:
    """The cached weight's two NVFP4 copies; the input saved for the weight gradient, its
    columnwise copy alone."""
    assert fp8_weight_bytes("nvfp4", 1600, "gb300") == pytest.approx(2 * 1600 * NV)
    assert saved_bytes("nvfp4") == pytest.approx(NV)


def test_nvfp4_gpus_are_the_presets_with_an_fp4_peak() -> None:
    from dlsched.hardware.gpu import get_gpu

    with_fp4 = tuple(n for n in bundled_presets("gpus.yaml") if "fp4" in get_gpu(n).spec.peak)
    assert sorted(with_fp4) == sorted(MXFP8_GPUS)


@pytest.mark.parametrize(("arguments", "field", "message"), [
    (("fp8", "nvfp4", "h100", {"fp8": 1}), "fp8_recipe", "b200, gb200, b300, gb300"),
    (("bf16", "nvfp4", "gb300", {"fp8": 1, "fp4": 1}), "fp8_recipe", "needs --precision fp8"),
])
def test_refused_naming_the_field(arguments, field, message) -> None:
    with pytest.raises(ConfigError, match=message) as refused:
        check_fp8(*arguments)
    assert refused.value.field == field


def test_refused_for_moe_tp_overlap_param_gather_and_generic_fp4() -> None:
    with pytest.raises(ConfigError) as refused:
        check_fp8("fp8", "nvfp4", "gb300", {"fp8": 1, "fp4": 1}, moe=True)
    assert refused.value.field == "fp8_recipe"
    for name in ("tp_comm_overlap", "fp8_param_gather"):
        with pytest.raises(ConfigError) as refused:
            RunSettings(precision="fp8", fp8_recipe="nvfp4", **{name: True})
        assert refused.value.field == name
    with pytest.raises(ConfigError) as refused:
        calibrated("gb300", "fp4").work(_fc1(), 1)
    assert refused.value.field == "precision"


def test_megatron_spells_it_as_fp4_flags() -> None:
    assert megatron_fp8_args("nvfp4", []) == ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]


def test_nvfp4_runs_are_their_own_format_in_the_envelope() -> None:
    """The ledger's two NVFP4 rows carry precision ``fp4`` (FP4 tensor cores), so their MFU
    (131% and 140% of the 16-bit peak) bounds NVFP4 plans, not GB300 FP8 ones."""
    from dlsched.job import intervals
    from dlsched.job.envelope import Features, bundled_residuals

    table = bundled_residuals()
    nvfp4 = {r.id: r for r in table if r.id.endswith("-nvfp4")}
    assert {r.features.get("precision") for r in nvfp4.values()} == {"fp4"}

    def plan(precision: str) -> Features:
        return Features(("gb300", precision, "interleaved", "none", 1, 1, True, False, False),
                        70e9, 4)

    fp8_best = max(r.mfu_published for r in table if r.features.get("gpu") == "gb300"
                   and r.features.get("precision") == "fp8" and not r.features.get("ep"))
    assert intervals.frontier(plan("fp8"), table) == pytest.approx(fp8_best)
    assert fp8_best < 1.3
    assert intervals.frontier(plan("fp4"), table) == pytest.approx(
        max(r.mfu_published for r in nvfp4.values()))
