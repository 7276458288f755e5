"""Megatron-Core's eager rotary embedding (GPT-OSS's YaRN, ``rope_fusion`` False):
job.compute.unfused_rope, kernels and passes counted by hand from the module docstring."""

from __future__ import annotations

import pytest

from dlsched.job.cluster import load_cluster
from dlsched.job.compute.layer_costs import block_costs, decoder_model
from dlsched.job.model_spec import bundled_specs

GPT_OSS = bundled_specs()["gpt-oss-120b"]
EAGER = GPT_OSS.model_copy(update={"rope_fusion": False})
Q, K = 4096 * 64 * 64, 4096 * 8 * 64  # per sample: 64 query heads and 8 key heads of 64
RATE = 0.6832 * 3.35e12  # the h100 preset's achieved memory rate, B/s


def _rope_ops(spec) -> list:
    model = decoder_model(spec, 1, 1, "ring", "fused")
    return [(layer.name, op) for layer in model.layers for op in layer.ops
            if op.label == "rope-unfused"]


def test_fused_rope_adds_nothing() -> None:
    assert GPT_OSS.rope_fusion and _rope_ops(GPT_OSS) == []


def test_eager_rope_by_hand() -> None:
    """Queries and keys, each: forward 6 kernels over the tensor (2+1+2+2+3+2 = 12 passes)
    and 6 over the frequencies; backward 7 kernels, 14 passes; after the QKV projection."""
    ops = _rope_ops(EAGER)
    assert len(ops) == 1 and ops[0][0] == "h.0.attn.c_attn.weight"
    op = ops[0][1]
    assert (op.kernels, op.launches_backward) == (24, 14)
    assert op.elements == 12 * (Q + K) and op.backward_elements == 14 * (Q + K)
    assert op.split  # with the heads over TP


def test_eager_rope_seconds_by_hand() -> None:
    """One H100 microbatch of 1, TP 1. Backward GPU-bound: 14 passes of 16-bit q and k at the
    preset's memory rate (0.2309 ms). Forward: more than its 12 passes' 0.198 ms, at most its
    24 launches at the h100 preset's 77.44 us (1.859 ms: the block's host runs ahead)."""
    group = load_cluster("dgx-h100", 8, None).group_topology(1, 1)
    costs = [block_costs(spec, 1, "h100", "bf16", 1, False, "none", group, "baseline", 1,
                         "ring", "fused") for spec in (GPT_OSS, EAGER)]
    forward = costs[1].layer_f - costs[0].layer_f
    assert 12 * (Q + K) * 2 / RATE < forward <= 24 * 77.44e-6 * (1 + 1e-9)
    assert costs[1].layer_b - costs[0].layer_b == pytest.approx(14 * (Q + K) * 2 / RATE)


def _order(spec, attention: str) -> list[str]:
    """The labels of the ops of each block-0 attention QKV layer, in order (weight, bias)."""
    model = decoder_model(spec, 1, 1, "ring", attention)
    return [op.label for layer in model.layers if ".attn.c_attn" in layer.name
            for op in layer.ops]


@pytest.mark.parametrize("attention", ["fused", "flash", "unfused"])
@pytest.mark.parametrize(("name", "update"), [
    ("llama3-8b", {}), ("qwen3-8b", {}), ("gpt-oss-120b", {}),
    ("gpt-oss-120b", {"bias": False})])  # bias-free with sinks: the cast on the GEMM's layer
def test_eager_rope_runs_after_the_projection_and_norms_before_the_core(
        name, update, attention) -> None:
    """Megatron-Core rotates q and k after the QKV GEMM and the query / key norms, before the
    attention core: in a bias-free model (Llama, Qwen3) the zoo puts the core on the QKV
    GEMM's own layer, and the rotary must still precede it (and the sink cast, repeat_kv)."""
    spec = bundled_specs()[name].model_copy(update={"rope_fusion": False, **update})
    labels = _order(spec, attention)
    rope = labels.index("rope-unfused")
    core = labels.index("scores" if attention == "unfused" else "flash-attention")
    assert labels[0].endswith("attn.c_attn") and 0 < rope < core
    assert all(labels.index(label) > rope for label in ("attn.sink-cast", "repeat_kv")
               if label in labels)
    assert all(labels.index(label) < rope for label in ("attn.qk_norm", "attn.k-contiguous")
               if label in labels)
    assert ("attn.qk_norm" in labels) == spec.qk_norm
