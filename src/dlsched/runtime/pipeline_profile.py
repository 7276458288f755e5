"""Profile a PipelineModel's blocks into the chain file ``dlsched pipeline plan --model`` reads.

Per block, on one microbatch, with the same autograd helpers torch's pipeline stages use:
forward seconds (the last block includes the loss), full backward (``stage_backward``: input and
weight gradients in one pass), backward-input (``stage_backward_input``) and backward-weight
(``stage_backward_weight``) seconds, each the median of ``repeats`` runs after ``warmup``; output
activation bytes, parameter bytes, and stash bytes (every tensor autograd saves for the backward,
counted once per storage, through ``saved_tensors_hooks``). A block whose input is not a
floating tensor (token ids) has no input gradient: I = 0 and W = the full backward, as in
torch's first stage. The chain stores seconds as FLOP on the ``REFERENCE_FLOPS`` GPU (plan on
devices of that speed, see ``pipeline_calibrate``), the full backward as ``backward_flops`` and
sum(I) / sum(I + W) over the blocks as ``input_grad_fraction`` (the chain has one fraction)
and sum(I + W) / sum(B) as ``split_backward_factor``: two autograd passes cost more than one
(on CPU about 1.2x at 8 sequences of gpt-small, 1.5x at 2), which the planner must weigh
before it chooses a split-backward schedule.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.distributed.pipelining._backward import (
    stage_backward,
    stage_backward_input,
    stage_backward_weight,
)

from dlsched.errors import ConfigError
from dlsched.pipeline.chain import REFERENCE_FLOPS
from dlsched.runtime.pipeline_model import PipelineModel


@dataclass(frozen=True)
class BlockProfile:
    """Measured costs of one block for one microbatch: seconds and bytes."""

    name: str
    forward_s: float
    backward_s: float
    backward_input_s: float
    backward_weight_s: float
    activation_bytes: int
    param_bytes: int
    stash_bytes: int


def _median_seconds(run: Callable[[], Callable[[], object]], repeats: int, warmup: int) -> float:
    """Median time of the timed part: ``run()`` prepares and returns the callable to time."""
    times = []
    for index in range(warmup + repeats):
        timed = run()
        start = time.perf_counter()
        timed()
        if index >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def _stash_bytes(forward: Callable[[], Tensor]) -> int:
    storages: dict[int, int] = {}

    def pack(tensor: Tensor) -> Tensor:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        forward()
    return sum(storages.values())


def _profile_block(name: str, block: torch.nn.Module, x: Tensor,
                   loss: Callable[[Tensor], Tensor] | None, repeats: int,
                   warmup: int) -> tuple[BlockProfile, Tensor]:
    has_input_grad = x.is_floating_point()
    source = x.detach().requires_grad_(has_input_grad)
    params = list(block.parameters())

    def forward() -> Tensor:
        output = block(source)
        return loss(output) if loss is not None else output

    with torch.no_grad():
        output = block(source)
    grad = None if loss is not None else torch.randn_like(output)

    def full() -> Callable[[], object]:
        out = forward()
        if grad is None:
            return lambda: stage_backward(out, None, [source])
        return lambda: stage_backward((out,), (grad,), [source])

    def input_part() -> Callable[[], object]:
        out = forward()
        return lambda: stage_backward_input([out], None if grad is None else [grad], [source],
                                            iter(params))

    def weight_part() -> Callable[[], object]:
        out = forward()
        _, groups = stage_backward_input([out], None if grad is None else [grad], [source],
                                         iter(params))
        return lambda: stage_backward_weight(iter(params), groups)

    forward_s = _median_seconds(lambda: forward, repeats, warmup)
    backward_s = _median_seconds(full, repeats, warmup)
    input_s = _median_seconds(input_part, repeats, warmup) if has_input_grad else 0.0
    weight_s = _median_seconds(weight_part, repeats, warmup) if has_input_grad else backward_s
    block.zero_grad(set_to_none=True)
    profile = BlockProfile(name, forward_s, backward_s, input_s, weight_s,
                           output.numel() * output.element_size(),
                           sum(p.numel() * p.element_size() for p in params),
                           _stash_bytes(forward))
    return profile, output


def profile_blocks(model: PipelineModel, microbatch_size: int, repeats: int = 5,
                   warmup: int = 2) -> list[BlockProfile]:
    """Measure every block of ``model`` on one microbatch of ``microbatch_size`` samples."""
    if not 1 <= microbatch_size <= 1_000_000 or not 1 <= repeats <= 1000 or warmup < 0:
        raise ConfigError(f"microbatch_size: {microbatch_size} (1..1e6), repeats: {repeats} "
                          f"(1..1000) and warmup: {warmup} (>= 0) are out of range")
    inputs, targets = model.make_batch(microbatch_size, 0)
    model.loss_fn(model.blocks(inputs), targets).backward()  # the first autograd pass: untimed
    model.blocks.zero_grad(set_to_none=True)
    named = list(model.blocks.named_children())
    profiles, x = [], inputs
    for index, (name, block) in enumerate(named):
        is_last = index == len(named) - 1
        loss = (lambda out: model.loss_fn(out, targets)) if is_last else None
        profile, x = _profile_block(name, block, x, loss, repeats, warmup)
        profiles.append(profile)
    return profiles


def chain_document(name: str, profiles: list[BlockProfile]) -> dict:
    """The chain file (``pipeline.model_source.ChainSpec``) of measured blocks: seconds as FLOP
    on the ``REFERENCE_FLOPS`` GPU, bytes as integers."""
    split = sum(p.backward_input_s + p.backward_weight_s for p in profiles)
    full = sum(p.backward_s for p in profiles)
    fraction = sum(p.backward_input_s for p in profiles) / split if split > 0 else 0.5
    factor = split / full if split > 0 and full > 0 else 1.0
    return {"name": name, "input_grad_fraction": min(max(fraction, 0.01), 0.99),
            "split_backward_factor": min(max(factor, 0.1), 10.0),
            "blocks": [{"name": p.name, "forward_flops": p.forward_s * REFERENCE_FLOPS,
                        "backward_flops": p.backward_s * REFERENCE_FLOPS,
                        "activation": p.activation_bytes, "params": p.param_bytes,
                        "stash": p.stash_bytes} for p in profiles]}
