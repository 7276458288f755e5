"""torch.distributed.pipelining's buffers in the memory model (job.memory.pipeline_buffers),
by hand on the tiny Llama of tiny_llama.py: b 2 x s 16 = 32 tokens a microbatch, hidden 64, so
one activation sent between stages is 32 x 64 x 2 B = 4,096 B and one microbatch's bf16 logits
32 x 256 x 2 B = 16,384 B."""

from __future__ import annotations

import pytest
from tiny_llama import TINY

from dlsched.errors import ConfigError
from dlsched.job.execution import Execution
from dlsched.job.memory.per_gpu import memory_per_gpu, peak_memory
from dlsched.job.memory.pipeline_buffers import StageBuffers, boundary_bytes, stage_buffers
from dlsched.job.memory.torch_runtime import Runtime

ACT, LOGITS = 4096.0, 16384.0
FSDP2 = Runtime("fsdp2")


def _layout(**fields: object) -> Execution:
    base: dict[str, object] = {"tp": 1, "pp": 2, "dp": 2, "microbatch_size": 2,
                               "global_batch": 16, "recompute": "full", "zero": 3}
    return Execution(**{**base, **fields})  # 16 / (2 x 2) = 4 microbatches


def test_one_buffer_per_microbatch_and_kind() -> None:
    """PP 2, 4 microbatches: the first stage receives gradients only (4 x 4,096 B), the last
    activations only (4 x 4,096 B) and shares one activation a microbatch with its stash.
    Kept to the step's end, per forward: nothing (today's TorchTitan, return_outputs=False),
    the last stage's 16,384 B of logits (PyTorch from #153383), or also the first stage's
    output (PyTorch before it)."""
    layout = _layout()
    assert boundary_bytes(TINY, layout, 2) == ACT
    assert stage_buffers(TINY, layout, 0, 2) == StageBuffers(4 * ACT, (0.0,), (0.0,))
    assert stage_buffers(TINY, layout, 1, 2) == StageBuffers(4 * ACT, (0.0,), (ACT,))
    assert stage_buffers(TINY, layout, 1, 2, "last").kept == (LOGITS,)
    assert stage_buffers(TINY, layout, 0, 2, "last").kept == (0.0,)
    assert stage_buffers(TINY, layout, 0, 2, "all").kept == (ACT,)
    assert stage_buffers(TINY, layout, 1, 2, "all").kept == (LOGITS,)


def test_an_unknown_outputs_setting_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"pipeline_outputs.*accepted: none, last, all"):
        stage_buffers(TINY, _layout(), 1, 2, "some")
    with pytest.raises(ConfigError, match=r"pipeline_outputs"):
        Runtime("fsdp2", pipeline_outputs="some")


def test_a_middle_stage_holds_both_kinds() -> None:
    """PP 4: rank 1 receives activations and gradients, 2 x 4 x 4,096 B."""
    layout = _layout(pp=4, dp=1, global_batch=8)
    assert stage_buffers(TINY, layout, 1, 2) == StageBuffers(8 * ACT, (0.0,), (ACT,))


def test_sequence_parallelism_and_cp_shrink_the_boundary() -> None:
    """TP 2 with SP sends 32 x 64 / 2 elements; CP 2 halves the tokens; the logits are
    vocabulary-sharded by TP (256 / 2 columns) and their tokens split by CP."""
    sp = _layout(tp=2, dp=1, global_batch=8, sequence_parallel=True)
    assert boundary_bytes(TINY, sp, 2) == ACT / 2
    assert stage_buffers(TINY, sp, 1, 2, "last").kept == (LOGITS / 2,)
    cp = _layout(cp=2, dp=1, global_batch=8)
    assert boundary_bytes(TINY, cp, 2) == ACT / 2
    assert stage_buffers(TINY, cp, 1, 2, "last").kept == (LOGITS / 2,)


def test_interleaving_gives_each_chunk_its_own() -> None:
    """PP 2, 2 chunks: rank 0 holds virtual stages 0 and 2 (gradients for 0; activations and
    gradients for 2), rank 1 stages 1 and 3 (both for 1; activations and the logits for 3)."""
    layout = _layout(chunks=2, schedule="interleaved", dp=1, global_batch=8)
    assert stage_buffers(TINY, layout, 0, 2) == StageBuffers(12 * ACT, (0.0, 0.0), (0.0, ACT))
    assert stage_buffers(TINY, layout, 1, 2, "last") == StageBuffers(12 * ACT, (0.0, LOGITS),
                                                                     (ACT, ACT))


def test_the_last_rank_peaks_with_every_forwards_logits() -> None:
    """1F1B's last rank runs F B F B F B F B: kept logits ("last"), after its 4th forward it
    holds one microbatch's stash and all four microbatches' logits: buffers 4 x 4,096 + 4 x
    16,384 B; none kept, its 4 receive buffers. Its stash is the Megatron-style runtime's less
    the received input (one activation). The first rank holds its 4 gradient buffers; keeping
    every stage's outputs ("all") it runs F F B F B F B B and peaks after its 4th forward (2
    in flight, 4 outputs kept): 4 + 4 activations. Megatron's runtime (sharding zero) has none
    of these."""
    layout = _layout()
    last = memory_per_gpu(TINY, layout, "bf16", stage=1, runtime=Runtime("fsdp2",
                                                                           pipeline_outputs="last"))
    assert last.buffers == 4 * ACT + 4 * LOGITS
    assert last.in_flight == (1,)
    assert memory_per_gpu(TINY, layout, "bf16", stage=1, runtime=FSDP2).buffers == 4 * ACT
    megatron = memory_per_gpu(TINY, layout, "bf16", stage=1)
    assert megatron.buffers == 0.0
    assert last.activations == megatron.activations - ACT
    assert memory_per_gpu(TINY, layout, "bf16", stage=0, runtime=FSDP2).buffers == 4 * ACT
    first = memory_per_gpu(TINY, layout, "bf16", stage=0,
                           runtime=Runtime("fsdp2", pipeline_outputs="all"))
    assert (first.buffers, first.in_flight) == (8 * ACT, (2,))


def test_a_middle_rank_can_need_the_most() -> None:
    """The tiny Llama with 4 layers on PP 4 with 128 microbatches and full recomputation (a
    layer keeps only its input, one activation a microbatch): rank 1 holds 3 microbatches of
    its layer's stash but 2 x 128 receive buffers, rank 0 4 microbatches and 128 buffers (and
    the embedding): the peak is not rank 0's, and the search for the peak finds the largest rank."""
    model = TINY.model_copy(update={"layers": 4})
    layout = _layout(pp=4, dp=1, global_batch=256)
    ranks = [memory_per_gpu(model, layout, "bf16", stage=s, runtime=FSDP2)
             for s in range(layout.pp)]
    assert ranks[1].buffers == 256 * ACT and ranks[0].buffers == 128 * ACT
    assert ranks[1].total > ranks[0].total
    assert peak_memory(model, layout, "bf16", runtime=FSDP2).total == \
        max(rank.total for rank in ranks)
