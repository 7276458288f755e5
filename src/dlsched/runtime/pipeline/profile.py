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

``execution`` (``runtime.execution``) puts the blocks and the batch on the device (CUDA: timed
with CUDA events), runs each block's forward (and the loss) under the precision's autocast,
and decides about parameters that get no gradient (``unused``: skip times them as they run,
error refuses the block naming the parameter; the split backward is timed over the parameters
that get a gradient, and every parameter's bytes count).
"""

from __future__ import annotations

import statistics
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
from dlsched.pipeline.chains.chain import REFERENCE_FLOPS
from dlsched.runtime.execution import Execution
from dlsched.runtime.host_memory import keep_freed_memory
from dlsched.runtime.pipeline.model import PipelineModel
from dlsched.runtime.recorder import Clock


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


def _median_seconds(run: Callable[[], Callable[[], object]], repeats: int, warmup: int,
                    clock: Clock) -> float:
    """Median time of the timed part: ``run()`` prepares and returns the callable to time
    (stamps of ``clock``: perf counter, or CUDA events that resolve once the GPU is there)."""
    times = []
    for index in range(warmup + repeats):
        timed = run()
        start = clock.stamp()
        timed()
        end = clock.stamp()
        if index >= warmup:
            times.append(clock.seconds(end) - clock.seconds(start))
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
                   warmup: int, execution: Execution) -> tuple[BlockProfile, Tensor]:
    has_input_grad = x.is_floating_point()
    source = x.detach().requires_grad_(has_input_grad)
    params = list(block.parameters())
    clock = Clock(cuda=execution.cuda)

    def forward() -> Tensor:
        with execution.autocast():
            output = block(source)
            return loss(output) if loss is not None else output

    with torch.no_grad(), execution.autocast():
        output = block(source)
    grad = None if loss is not None else torch.randn_like(output)

    def full() -> Callable[[], object]:
        out = forward()
        if grad is None:
            return lambda: stage_backward(out, None, [source])
        return lambda: stage_backward((out,), (grad,), [source])

    forward_s = _median_seconds(lambda: forward, repeats, warmup, clock)
    backward_s = _median_seconds(full, repeats, warmup, clock)
    used = _used_parameters(name, block, execution)

    def input_part() -> Callable[[], object]:
        out = forward()
        return lambda: stage_backward_input([out], None if grad is None else [grad], [source],
                                            iter(used))

    def weight_part() -> Callable[[], object]:
        out = forward()
        _, groups = stage_backward_input([out], None if grad is None else [grad], [source],
                                         iter(used))
        return lambda: stage_backward_weight(iter(used), groups)

    input_s = _median_seconds(input_part, repeats, warmup, clock) if has_input_grad else 0.0
    weight_s = (_median_seconds(weight_part, repeats, warmup, clock) if has_input_grad
                else backward_s)
    block.zero_grad(set_to_none=True)
    profile = BlockProfile(name, forward_s, backward_s, input_s, weight_s,
                           output.numel() * output.element_size(),
                           sum(p.numel() * p.element_size() for p in params),
                           _stash_bytes(forward))
    return profile, output


def _used_parameters(name: str, block: torch.nn.Module,
                     execution: Execution) -> list[torch.nn.Parameter]:
    """After a full backward: the block's parameters that got a gradient (the split backward
    is timed over those: torch's ``stage_backward_input`` fails on a parameter the output
    does not depend on); ConfigError naming the first one without when ``execution.unused``
    is error."""
    for param_name, param in block.named_parameters():
        if param.grad is None and execution.unused == "error":
            raise ConfigError(f"model: parameter {name}.{param_name} gets no gradient from the "
                              "loss (--unused error); --unused skip profiles it as it runs")
    return [param for param in block.parameters() if param.grad is not None]


def profile_blocks(model: PipelineModel, microbatch_size: int, repeats: int = 5,
                   warmup: int = 2, execution: Execution | None = None) -> list[BlockProfile]:
    """Measure every block of ``model`` on one microbatch of ``microbatch_size`` samples under
    ``execution`` (default: CPU, FP32, unused parameters skipped); the blocks move to its
    device. Keeps this process's freed host memory from then on, as the pipeline ranks do
    (``host_memory``)."""
    if not 1 <= microbatch_size <= 1_000_000 or not 1 <= repeats <= 1000 or warmup < 0:
        raise ConfigError(f"microbatch_size: {microbatch_size} (1..1e6), repeats: {repeats} "
                          f"(1..1000) and warmup: {warmup} (>= 0) are out of range")
    keep_freed_memory()
    execution = execution or Execution()
    blocks, inputs, targets = execution.prepare(model.blocks, *model.make_batch(
        microbatch_size, 0))
    profiles, x = [], inputs
    with execution.running():
        with execution.autocast():
            loss = model.loss_fn(blocks(inputs), targets)
        loss.backward()  # the first autograd pass: untimed
        blocks.zero_grad(set_to_none=True)
        named = list(blocks.named_children())
        for index, (name, block) in enumerate(named):
            is_last = index == len(named) - 1
            loss_fn = (lambda out: model.loss_fn(out, targets)) if is_last else None
            profile, x = _profile_block(name, block, x, loss_fn, repeats, warmup, execution)
            profiles.append(profile)
    return profiles


def microbatch_seconds(profiles: list[BlockProfile]) -> float:
    """Forward + full backward seconds of one microbatch over every profiled block."""
    return sum(p.forward_s + p.backward_s for p in profiles)


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
