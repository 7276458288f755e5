"""How a pipeline rank's point-to-point transfers meet its compute (``Job.pipeline_p2p``).

* ``blocking``: a rank computes nothing while its transfers run. Megatron-LM's ``_communicate``
  (``megatron/p2p_communication.py`` at SC21's aed2f75 and Korthikanti et al.'s 2e90a34)
  batches the step's sends and receives (``batch_isend_irecv``), waits for them, then calls
  ``torch.cuda.synchronize()``; Megatron-Core keeps that path as its default
  (``batch_p2p_comm=True``, ``batch_p2p_sync=True``) and always uses it for the non-interleaved
  schedule. Each stage's forward then lasts until its activation has left, and each backward
  until its gradient has: the transfer is added to the sending action, and the receiver waits
  for it as before.
* ``overlapped``: transfers run on their own stream beside the compute (Megatron-Core's
  ``overlap_p2p_comm``, which Megatron-LM's ``pretrain_gpt.py`` turns on for the interleaved
  schedule unless ``--no-overlap-p2p-communication``, and NeMo's comm-overlap callback sets
  with virtual pipelining; ``torch.distributed.pipelining``'s asynchronous sends): what
  ``job.pipeline_time`` times without change.
* ``auto`` (the default): Megatron-Core's choice, ``overlapped`` for the interleaved schedule
  and ``blocking`` for every other one.

Megatron-LM's scatter-gather of the transfers (SC21 Sec. 4.1: without sequence parallelism each
TP rank sends ``1/t`` of the activation, ``job.evaluation.replica``) ends with an all-gather of
the received pieces over the TP group on the receiver's stream, before its next compute:
``receive_gather_s`` is added to the receiving action's stage whatever the mode.
"""

from __future__ import annotations

from dataclasses import replace

from dlsched.job.evaluation.pipeline_time import PipelineTimes
from dlsched.job.run_choices import check_setting


def resolved_p2p(mode: str, schedule: str) -> str:
    """``blocking`` or ``overlapped`` for ``mode`` under ``schedule`` (module docstring)."""
    if check_setting("pipeline_p2p", mode) != "auto":
        return mode
    return "overlapped" if schedule == "interleaved" else "blocking"


def with_p2p(times: PipelineTimes, mode: str, receive_gather_s: float) -> PipelineTimes:
    """``times`` as the pipeline runs them under ``mode`` (resolved): each receiving action's
    stage pays the gather of its received pieces, and with ``blocking`` each sending action
    lasts until its transfer is done (the transfer itself then takes no extra time)."""
    forward, backward = list(times.forward), list(times.backward)
    for boundary in range(len(times.send)):  # stage ``boundary`` sends to ``boundary + 1``
        forward[boundary + 1] += receive_gather_s  # its activation arrives in pieces
        backward[boundary] += receive_gather_s  # and the gradient sent back
    if resolved_p2p(mode, times.schedule) == "overlapped":
        return replace(times, forward=tuple(forward), backward=tuple(backward))
    for boundary, seconds in enumerate(times.send):
        forward[boundary] += seconds
        backward[boundary + 1] += seconds
    return replace(times, forward=tuple(forward), backward=tuple(backward),
                   send=(0.0,) * len(times.send))
