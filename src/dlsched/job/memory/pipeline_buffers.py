"""The buffers ``torch.distributed.pipelining`` keeps on a pipeline rank (bytes), for
``job.memory.per_gpu``: what a TorchTitan run with pipeline parallelism holds beyond the stash.

Read in ``torch/distributed/pipelining/stage.py`` (``_PipelineStageBase``, ``PipelineStage``)
and ``schedules.py``:

* **Receive buffers, one per microbatch.** ``_prepare_forward_infra`` creates, for every
  microbatch of the step, the stage's input receive buffers (``_create_act_recv_info``: a
  ``torch.empty`` of the input's shape, ``_make_tensor_from_meta``), and
  ``_prepare_backward_infra`` the gradient receive buffers of its outputs
  (``_create_grad_recv_info``), again one per microbatch. They are allocated once, for the
  schedule's microbatch count, and kept in ``args_recv_info`` / ``grad_recv_info`` from step to
  step: ``m`` activation-sized buffers on every stage but the first, ``m`` more on every stage
  but the last, whatever the number of microbatches in flight.
* **The received input is the stage's input.** ``forward_one_chunk`` hands the receive buffer
  itself to the stage's module (``_retrieve_recv_activations``), so the first layer's saved
  input (its norm's input, counted in the stash of every in-flight microbatch) is that buffer:
  counted once, here, and taken out of the stash (``shared``).
* **Outputs kept to the step's end** (``pipeline_outputs``, a run setting: which version
  ran). ``forward_one_chunk`` appends a stage's output to ``output_chunks`` (for
  ``merge_output_chunks`` after the step) and ``clear_runtime_states`` drops them only at the
  next step; ``backward_one_chunk`` detaches the last stage's after its backward
  (pytorch/pytorch#138504, 2024-10), which frees the graph, not the data. Until
  pytorch/pytorch#153383 (2025-05) every stage appended its output (``all``: the Dec 2024
  torch of TorchTitan 9dec370's runs), from it only the last stage (``last``), and since
  ``step(..., return_outputs=False)`` (``forward_one_chunk``'s ``save_forward_output``), which
  TorchTitan passes since e5ef99a ("Update PP to release memory earlier", 2025-10-22), none
  (``none``, the default: today's TorchTitan). A stage's output is an activation-sized tensor
  (below); the last stage's, in TorchTitan, the logits: the output projection's
  ``param_dtype`` (bf16) output, vocabulary-sharded under TP (``loss_parallel``). Each
  forward adds one microbatch's output that stays to the step's end (``kept``; the walk,
  ``in_flight.accumulating_peak``, times them).

Activation-sized means the tensor sent between stages: one microbatch of the stage's tokens
(``s / cp``) at the hidden width in the activations' precision, split over TP when sequence
parallelism shards it (TorchTitan's layers return the sequence-sharded local tensor).
"""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.job.communication.context_parallel import local_tokens
from dlsched.job.evaluation.unit_walk import held_stages
from dlsched.job.execution import Execution
from dlsched.job.memory.parameters import padded_vocab
from dlsched.job.model_spec import Model
from dlsched.job.run_choices import PIPELINE_OUTPUTS, check_setting

__all__ = ["PIPELINE_OUTPUTS", "StageBuffers", "boundary_bytes", "stage_buffers"]

LOGIT_BYTES = 2  # the output projection's bf16 output (FSDP2's param_dtype), kept per forward


@dataclass(frozen=True)
class StageBuffers:
    """A rank's pipelining buffers: ``fixed`` bytes allocated for the step's microbatches
    (receive buffers of activations and of gradients), and per chunk the bytes each forward
    adds until the step ends (``kept``) and the bytes per in-flight microbatch the stash
    already counts as the chunk's received input (``shared``)."""

    fixed: float
    kept: tuple[float, ...]
    shared: tuple[float, ...]


def boundary_bytes(spec: Model, layout: Execution, activation_bytes: int) -> float:
    """Bytes of one microbatch's activation sent between stages (module docstring)."""
    split = layout.tp if layout.sequence_parallel else 1
    return (activation_bytes * local_tokens(spec, layout.cp) * layout.microbatch_size
            * spec.hidden / split)


def stage_buffers(spec: Model, layout: Execution, stage: int, activation_bytes: int,
                  outputs: str = "none") -> StageBuffers:
    """The pipelining buffers of pipeline rank ``stage`` (module docstring), each of its
    chunks (virtual stages) its own; ``outputs``: the stages whose outputs are kept
    (``PIPELINE_OUTPUTS``)."""
    check_setting("pipeline_outputs", outputs)
    chunks = held_stages(layout.schedule, layout.pp, layout.chunks, stage)
    last = layout.virtual_stages - 1
    m, act = layout.num_microbatches, boundary_bytes(spec, layout, activation_bytes)
    logits = (LOGIT_BYTES * local_tokens(spec, layout.cp) * layout.microbatch_size
              * padded_vocab(spec.vocab, layout.tp) / layout.tp)
    fixed = sum(m * act * ((virtual != 0) + (virtual != last)) for virtual in chunks)
    kept = (0.0 if outputs == "none" else logits if virtual == last else
            act if outputs == "all" else 0.0 for virtual in chunks)
    return StageBuffers(fixed, tuple(kept),
                        tuple(act if virtual != 0 else 0.0 for virtual in chunks))
