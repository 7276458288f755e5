"""Gradient buckets of a replicated stage, as torch's DistributedDataParallel forms them, for
plans whose all-reduce overlaps the last backward (``PipelinePlan.ddp_buckets``).

DDP (torch.nn.parallel.DistributedDataParallel, torch 2.13 docs and source) puts the
parameters into buckets in reverse order of the model (the order the backward produces their
gradients): the first bucket holds up to ``DDP_FIRST_BUCKET_BYTES`` (1 MiB,
``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``), every later one up to ``bucket_cap_mb``
(default 25 MiB). With gradient accumulation over microbatches (``no_sync`` on all but the
last), a bucket's all-reduce is launched as soon as the last backward has produced all its
gradients, on one communication stream (buckets reduced one after another), overlapping the
rest of the backward.

We know a block's parameter bytes and backward FLOP, not its tensors: inside a block the
gradients are taken to appear evenly over the block's backward (a bucket boundary may fall
inside a block). That lets a bucket start a little earlier than whole tensors would, which
favours the DDP plan.
"""

from __future__ import annotations

from dlsched.pipeline.chains.chain import Chain

DDP_BUCKET_BYTES = 25 * 2**20
"""torch DDP's default ``bucket_cap_mb``: 25 MiB of gradients per bucket."""
DDP_FIRST_BUCKET_BYTES = 2**20
"""torch DDP's first (smallest) bucket: 1 MiB."""


def ddp_buckets(chain: Chain, first: int, last: int) -> list[tuple[float, float]]:
    """Buckets of blocks ``first..last-1`` in launch order: (gradient bytes, fraction of the
    stage's backward done when the bucket is complete, in [0, 1])."""
    params = chain.param_bytes[first:last][::-1]
    work = chain.backward_flops[first:last][::-1]
    total_work = float(work.sum())
    buckets: list[tuple[float, float]] = []
    cap, filled, done = DDP_FIRST_BUCKET_BYTES, 0.0, 0.0
    for size, flops in zip(params.tolist(), work.tolist(), strict=True):
        left = size
        while left > 0:
            take = min(left, cap - filled)
            filled += take
            left -= take
            if filled >= cap:
                progress = done + flops * (size - left) / size
                buckets.append((filled, progress / total_work if total_work else 1.0))
                cap, filled = DDP_BUCKET_BYTES, 0.0
        done += flops
    if filled > 0:
        buckets.append((filled, 1.0))
    return buckets


def last_bucket_bytes(chain: Chain, first: int, last: int) -> float:
    """Bytes of the bucket completed by the end of the stage's backward: its all-reduce must
    follow the last backward (0 when the blocks have no parameters)."""
    buckets = ddp_buckets(chain, first, last)
    return buckets[-1][0] if buckets else 0.0
