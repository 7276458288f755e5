"""PyTorch's runtime in the memory model (job.memory.torch_runtime): FSDP2's states and
unsharded weights, its block-backward buffers, the float8 all-gather and the saves compiled
blocks drop, each by hand on one small Llama-style layer."""

from __future__ import annotations

import pytest
from tiny_llama import EMBEDDING, HEAD, LAYER, LINEAR, ROOT, TINY

from dlsched.errors import ConfigError
from dlsched.job.execution import Execution
from dlsched.job.memory.allocator import allocated_bytes
from dlsched.job.memory.in_flight import accumulating_peak, in_flight_peak
from dlsched.job.memory.per_gpu import layer_activations, memory_per_gpu
from dlsched.job.memory.sharded_units import layer_unit
from dlsched.job.memory.torch_runtime import (
    Runtime,
    backward_transient,
    check_runtime,
    dead_saves,
    persistent_bytes,
)
from dlsched.job.model_spec import Model

FSDP2 = Runtime("fsdp2")


def _layout(**fields: object) -> Execution:
    base: dict[str, object] = {"tp": 1, "pp": 1, "dp": 4, "microbatch_size": 2,
                               "global_batch": 8, "recompute": "selective-op", "zero": 3}
    return Execution(**{**base, **fields})


def test_compiled_blocks_drop_the_last_matmuls_output() -> None:
    """b 2 x s 16 = 32 tokens: w2's output 32 x 64 = 2,048 elements; with TP 2 and SP also its
    reduce-scatter's 32 x 64 / 2 = 1,024; none under full checkpointing, none when the policy
    recomputes the last matmul (a plain MLP: wq wk wv wo w1 w2 keeps wq, wv, w1)."""
    assert dead_saves(TINY, _layout()) == 2048
    assert dead_saves(TINY, _layout(tp=2, dp=2, sequence_parallel=True)) == 3072
    assert dead_saves(TINY, _layout(recompute="full")) == 0
    plain = Model("tiny-gpt", layers=2, hidden=64, heads=4, seq=16, vocab=256,
                  ffn_hidden=128, gated_ffn=False, bias=False, rms_norm=True,
                  learned_positions=False)
    assert dead_saves(plain, _layout()) == 0
    eager, _ = layer_activations(TINY, _layout(), "bf16")
    compiled, _ = layer_activations(TINY, _layout(), "bf16", runtime=Runtime(compile=True))
    assert eager - compiled == 2 * 2048  # bf16


def test_fsdp2_states_are_fp32_parameters_gradients_and_two_moments() -> None:
    """Two layers and the root over 4 shards: (2 x 36,992 + 32,832) x (4 + 4 + 8) / 4 bytes,
    against ZeRO's (2 + 4 + 12) / 4."""
    params = 2 * LAYER + ROOT
    fsdp2 = memory_per_gpu(TINY, _layout(), "bf16", runtime=FSDP2)
    zero = memory_per_gpu(TINY, _layout(), "bf16")
    assert fsdp2.parameters == zero.parameters == params
    assert (fsdp2.weights, fsdp2.gradients, fsdp2.optimizer) == (params, params, 2 * params)
    assert zero.weights + zero.gradients + zero.optimizer == pytest.approx(params * 18 / 4)


def test_fsdp2_keeps_the_root_and_the_last_block_unsharded() -> None:
    """bf16: root 32,832 x 2 + last block 36,992 x 2 = 139,648 B; the float8 all-gather
    gathers the block's 36,864 linear weights in 1 byte (its norms 2): 65,664 + 37,120. With
    PP every block of the rank stays unsharded."""
    bf16 = layer_unit(TINY, 1, "bf16", "fsdp2", False, 4).gathered
    fp8 = layer_unit(TINY, 1, "fp8", "fsdp2", True, 4).gathered
    assert (bf16, fp8) == (2 * LAYER, LINEAR + 2 * 128)
    assert persistent_bytes("fsdp2", bf16, 2, EMBEDDING, HEAD, 1) == 139_648
    assert persistent_bytes("fsdp2", fp8, 2, EMBEDDING, HEAD, 1) == 65_664 + 37_120
    assert persistent_bytes("fsdp2", bf16, 2, EMBEDDING, HEAD, 2) == 65_664 + 2 * 73_984
    breakdown = memory_per_gpu(TINY, _layout(), "bf16",
                               runtime=Runtime("fsdp2", fp8_all_gather=True))
    assert breakdown.gathered == 65_664 + 37_120
    assert breakdown.parts()["gathered"] == breakdown.gathered


def test_split_wrapping_keeps_only_norm_and_output() -> None:
    """TorchTitan from 83e6941: [norm, output] kept, 16,448 x 2 = 32,896 B; the embedding and
    every block resharded, but with PP all kept: 65,664 + 2 x 73,984."""
    bf16 = layer_unit(TINY, 1, "bf16", "fsdp2", False, 4).gathered
    assert persistent_bytes("fsdp2-split", bf16, 2, EMBEDDING, HEAD, 1) == 32_896
    assert persistent_bytes("fsdp2-split", bf16, 2, EMBEDDING, HEAD, 2) == 65_664 + 2 * 73_984
    split = memory_per_gpu(TINY, _layout(), "bf16", runtime=Runtime("fsdp2-split"))
    assert split.gathered == 32_896


def test_fsdp2_block_backward_buffers() -> None:
    """A block's backward: the previous block prefetched (73,984 B) and the bf16 gradient
    beside the FP32 reduce-scatter input, 36,992 x (2 + 4); no prefetch with PP."""
    assert backward_transient(2 * LAYER, LAYER, 1) == 73_984 + 6 * LAYER
    assert backward_transient(2 * LAYER, LAYER, 2) == 6 * LAYER


def test_loss_parallel_holds_four_fp32_logit_buffers() -> None:
    """rest 16 (weights 1 + gradients 2 + optimizer 3 + activations 10), logits 4, workspace 5:
    DTensor's loss_parallel 16 + 4 x 4; PyTorch's losses free the logits before the layers'
    backward, so a larger workspace wins alone (16 + 5), Megatron's keeps them (16 + 4 + 5)."""
    parts = {"weights": 1.0, "gradients": 2.0, "optimizer": 3.0, "activations": 10.0,
             "logits": 4.0, "workspace": 5.0, "reserve": 1.5, "gathered": 0.0}
    assert allocated_bytes(parts, "parallel") == 32.0
    small = {**parts, "logits": 1.0}
    assert allocated_bytes(small, "torch") == 21.0
    assert allocated_bytes(small, "megatron") == 22.0


def test_unmodelled_runtimes_are_named() -> None:
    assert check_runtime(Runtime(compile=True), "bf16", "none") is not None
    assert check_runtime(Runtime(compile=True), "fp8", "full") is None
    assert check_runtime(Runtime(), "fp8", "selective-op") is not None
    with pytest.raises(ConfigError, match=r"^sharding: .*accepted: zero, fsdp2, fsdp2-split"):
        Runtime("fsdp1")


def test_accumulating_peak_walks_one_f_one_b_by_hand() -> None:
    """PP 8, 8 microbatches, 1 B of stash a microbatch, 3 B of gradients: rank 0 runs its 8
    forwards (8 B held), then its first backward frees one and creates the gradients: 7 + 3 =
    10 B; with 0.5 B of gradients the 8 forwards' stash stays the peak. Rank 7 alternates F B
    from the start: after its second forward 1 + 3 B."""
    layout = Execution(1, 8, 1, 1, 8)
    assert accumulating_peak(layout, 0, [(1.0, 0.0)], [3.0]) == (7.0, 0.0, (7,), 3.0, 0.0)
    assert accumulating_peak(layout, 0, [(1.0, 0.0)], [0.5]) == (8.0, 0.0, (8,), 0.0, 0.0)
    assert accumulating_peak(layout, 7, [(0.75, 0.25)], [3.0]) == (0.75, 0.25, (1,), 3.0, 0.0)


def test_accumulating_peak_walks_interleaving_by_hand() -> None:
    """PP 2, 2 chunks, 2 microbatches, rank 0: warm-up 2 x 1 + 1 x 2 = 4 forwards, all of them
    (chunks 0 0 1 1 held: 4 B), then backwards of chunks 1 1 0 0; 5 B of gradients a chunk:
    after the first backward 3 + 5, the second 2 + 5, the third 1 + 10 = 11 B (the peak: one
    chunk-0 microbatch held, both chunks' gradients), the last 0 + 10."""
    layout = Execution(1, 2, 1, 1, 2, chunks=2, schedule="interleaved")
    assert accumulating_peak(layout, 0, [(1.0, 0.0), (1.0, 0.0)], [5.0, 5.0]) == \
        (1.0, 0.0, (1, 0), 10.0, 0.0)


@pytest.mark.parametrize("fields", [
    {"pp": 4, "global_batch": 8}, {"pp": 4, "global_batch": 2, "schedule": "gpipe"},
    {"pp": 2, "chunks": 2, "schedule": "interleaved", "global_batch": 4},
    {"pp": 3, "chunks": 2, "schedule": "interleaved", "global_batch": 6}])
def test_accumulating_peak_without_gradients_is_the_stash_peak(fields: dict) -> None:
    """No gradients: the walk's peak is ``in_flight_peak``'s on every rank."""
    layout = Execution(**{"tp": 1, "pp": 1, "dp": 1, "microbatch_size": 1, **fields})
    sizes = [(1.0 + chunk, 0.5) for chunk in range(layout.chunks)]
    for stage in range(layout.pp):
        walked = accumulating_peak(layout, stage, sizes, [0.0] * layout.chunks)
        assert walked[:3] == in_flight_peak(layout, stage, sizes)
        assert walked[3] == 0.0


def test_fsdp2_under_a_pipeline_holds_fp32_unsharded_gradients() -> None:
    """PP 2 over the two layers, DP 4, 2 microbatches: rank 0 holds layer 0 and the embedding,
    36,992 + 16,384 = 53,376 parameters, their FP32 sharded gradient 53,376 x 4 / 4 plus the
    unsharded FP32 accumulation 4 x 53,376 = 213,504 B from its first backward on, when it
    holds one microbatch (warm-up 1: F F B, the stash far below the gradients); the last rank
    (layer 1 + final norm and output: 53,440) after F B F. Without a pipeline, none; nor for
    ZeRO's sharding (Megatron's buffers are its main gradients)."""
    layout = _layout(pp=2, global_batch=16)
    first = memory_per_gpu(TINY, layout, "bf16", 0, runtime=FSDP2)
    last = memory_per_gpu(TINY, layout, "bf16", 1, runtime=FSDP2)
    assert first.gradients == 53_376 + 213_504 and first.in_flight == (1,)
    assert last.gradients == 53_440 + 4 * 53_440 and last.in_flight == (1,)
    assert memory_per_gpu(TINY, _layout(), "bf16", runtime=FSDP2).gradients == 2 * LAYER + ROOT
    zero = memory_per_gpu(TINY, layout, "bf16", 0)
    assert zero.in_flight == (2,)
