"""What a framework's memory readout reports of a job's peak memory per GPU (bytes).

``memory.per_gpu`` counts the bytes the job's tensors need at their peak, by part
(``MemoryBreakdown.parts()``, ``JobResult.memory``: model states, the stash of activations, the
FP32 ``logits``, the ``workspace`` transients, and a ``reserve`` for the CUDA context).
Published figures read one of three counters, each more than the last:

* ``allocated``: ``torch.cuda.max_memory_allocated()`` (``allocated_bytes.all.peak`` of
  ``torch.cuda.memory_stats``): the peak of the bytes live tensors occupy. The CUDA context and
  NCCL's buffers are not in it: they are not allocated through PyTorch's caching allocator.
* ``reserved``: ``torch.cuda.max_memory_reserved()`` (``reserved_bytes.all.peak``): the peak of
  the segments the caching allocator holds from the driver, the allocated bytes plus what it
  cannot hand out (blocks split and cached for other sizes: fragmentation). TorchTitan's
  ``memory:`` log line and its benchmark tables print this one (``DeviceMemoryMonitor``,
  ``max_reserved_gib``). Modelled as ``allocated / (1 - FRAGMENTATION)``: ``FRAGMENTATION`` =
  0.15, the share of reserved memory PyTorch's allocator loses to fragmentation in LLM training
  that GMLake (Guo et al., ASPLOS 2024) measured on average (``pipeline.chains.memory_model``,
  the constant the planners keep free for it). With ``expandable_segments:True`` in
  ``PYTORCH_CUDA_ALLOC_CONF`` (what TorchTitan's launch script sets: ``run_llama_train.sh``
  from a5e57e4, 2024-10-22, then ``run_train.sh``) the allocator keeps one virtual segment per
  stream and maps physical pages (2 MiB small, 20 MiB large) onto its end only when a request
  finds no free block, instead of one ``cudaMalloc`` per large request of that request's size
  (PyTorch's CUDA semantics notes, "Optimizing memory usage with PYTORCH_CUDA_ALLOC_CONF":
  the setting exists to stop blocks of slightly different sizes from fragmenting the
  cache); ``EXPANDABLE_FRAGMENTATION`` = 0: reserved is modelled as allocated, the pages'
  rounding left out (assumed: no measured share found).
* ``device``: what ``nvidia-smi`` shows for the process: the reserved segments plus the CUDA
  context (``CONTEXT_BYTES``, 1343 MiB: the Hugging Face guide "Model training anatomy",
  ``torch.ones(1).cuda()`` read with NVML) plus NCCL's buffers: per communicator, per channel,
  one buffer of ``NCCL_BUFFSIZE`` (4 MiB, NCCL's documented default of the variable) per
  direction to each of the two ring neighbours. The number of channels is NCCL's choice per
  topology and version (its ``NCCL_DEBUG=INFO`` log prints it): the caller gives it; no ledger
  row reads this counter, so this one is unvalidated.

The loss. Megatron-LM's vocabulary-parallel cross-entropy keeps one FP32 copy of the logits
(``per_gpu``'s ``logits`` part, Korthikanti et al.'s ``4 s b v``). PyTorch's
``F.cross_entropy`` on ``logits.float()`` (TorchTitan's ``cross_entropy_loss``) keeps its
log-softmax output (FP32) for the backward, and the backward of the log-softmax holds three
FP32 tensors of the logits' size at once (the saved output, the gradient it receives from the
NLL loss and the gradient it returns). The same loss compiled by ``torch.compile`` (Inductor
fuses the cast, the log-softmax and the NLL loss, keeps the 16-bit logits and a log-sum-exp per
token for the backward, which writes a 16-bit gradient) holds two 16-bit logit tensors, one FP32
tensor's worth. Under tensor parallelism TorchTitan computes that loss with DTensor's
``loss_parallel`` (on whenever TP > 1: ``ParallelDims.loss_parallel_enabled``, unless
``--training.disable_loss_parallel``), whose backward
(``torch/distributed/tensor/parallel/loss.py``, ``_nll_loss_and_log_softmax_backward``:
``grad_input = torch.zeros_like(x)`` ... ``(grad_input + torch.exp(x)) * grad_output``) holds
the saved log-softmax output, the zeros, ``exp(x)`` and their sum at once: four FP32 tensors of
the local logits' size (``parallel``). ``LOSS_BUFFERS`` of each implementation, in FP32 logit
sizes. The recomputed layer's transient (``workspace``) does not run at the same time as the
loss's backward, so the peak takes the larger of the two; Megatron's loss is counted with its
FP32 logits beside the workspace (its 16-bit logits are in the workspace), PyTorch's losses
free every logit tensor before the first layer's backward (TorchTitan's ``del pred`` before
``loss.backward()``, the autograd nodes' saved tensors released as they run), so theirs is the
larger of the loss's buffers and the workspace.
"""

from __future__ import annotations

from collections.abc import Mapping

from dlsched.errors import ConfigError
from dlsched.pipeline.chains.memory_model import CONTEXT_BYTES, FRAGMENTATION

READOUTS = ("allocated", "reserved", "device")
# FP32 logit-sized buffers live at the peak of the loss's backward, by loss implementation.
LOSS_BUFFERS = {"megatron": 1, "torch": 3, "parallel": 4, "compiled": 1}
EXPANDABLE_FRAGMENTATION = 0.0  # expandable segments: reserved = allocated (module docstring)


def fragmentation_margin(expandable_segments: bool) -> float:
    """The share of a GPU's memory the caching allocator loses to fragmentation: none with
    expandable segments (``EXPANDABLE_FRAGMENTATION``), else GMLake's ``FRAGMENTATION``."""
    return EXPANDABLE_FRAGMENTATION if expandable_segments else FRAGMENTATION

NCCL_BUFFSIZE = 4 * 2**20  # NCCL's default NCCL_BUFFSIZE (bytes), per channel, peer, direction
RING_NEIGHBOURS = 2


def check_readout(readout: str, loss: str) -> None:
    """ConfigError naming the field unless ``readout`` and ``loss`` are accepted."""
    if readout not in READOUTS:
        raise ConfigError(f"readout: {readout!r} is not a memory counter; accepted: "
                          + ", ".join(READOUTS))
    if loss not in LOSS_BUFFERS:
        raise ConfigError(f"loss: {loss!r} is not a loss implementation; accepted: "
                          + ", ".join(LOSS_BUFFERS))


def allocated_bytes(parts: Mapping[str, float], loss: str = "megatron") -> float:
    """Peak bytes of live tensors (``torch.cuda.max_memory_allocated``): every part but the
    CUDA context, the loss's FP32 buffers (``LOSS_BUFFERS`` of ``loss``) against the recomputed
    layer's transient, whichever is larger (module docstring)."""
    check_readout("allocated", loss)
    logits, workspace = parts["logits"], parts["workspace"]
    rest = sum(parts.values()) - parts["reserve"] - logits - workspace
    layer = logits + workspace if loss == "megatron" else workspace
    return rest + max(LOSS_BUFFERS[loss] * logits, layer)


def nccl_buffer_bytes(communicators: int, channels: int) -> float:
    """NCCL's buffers (bytes) of ``communicators`` communicators of ``channels`` channels
    each: one ``NCCL_BUFFSIZE`` buffer per channel per direction to each ring neighbour."""
    if communicators < 0 or channels < 1:
        raise ConfigError(f"nccl: communicators {communicators} must be >= 0 and channels "
                          f"{channels} >= 1")
    return communicators * channels * RING_NEIGHBOURS * 2 * NCCL_BUFFSIZE


def reported_bytes(parts: Mapping[str, float], readout: str, loss: str = "megatron",
                   fragmentation: float = FRAGMENTATION, communicators: int = 0,
                   channels: int = 1) -> float:
    """What the ``readout`` counter shows at the peak of a job whose memory is ``parts``
    (bytes by part; module docstring)."""
    check_readout(readout, loss)
    if not 0 <= fragmentation < 1:
        raise ConfigError(f"fragmentation: {fragmentation} must be in [0, 1)")
    allocated = allocated_bytes(parts, loss)
    if readout == "allocated":
        return allocated
    reserved = allocated / (1 - fragmentation)
    if readout == "reserved":
        return reserved
    return reserved + CONTEXT_BYTES + nccl_buffer_bytes(communicators, channels)
