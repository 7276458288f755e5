"""Memory per GPU as each ledger source measured it: which counter its figure reads and how its
runs compute the loss, so that ``dlsched validate`` prices the quantity that was published
(``job.memory.allocator``), not the evaluator's own total.

``READOUTS`` holds, per source whose rows publish ``memory_gib_per_gpu``, the counter
(``allocated``, ``reserved`` or ``device``), the loss implementation (``megatron`` or
``torch``) and the evidence for both. A memory row of a source not listed is refused with that
reason: a number whose meaning is unknown is not scored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dlsched.errors import ConfigError
from dlsched.job.memory.allocator import reported_bytes


@dataclass(frozen=True)
class Readout:
    """What a source's memory figure is: the allocator ``counter``, the runs' ``loss``
    implementation (``job.memory.allocator.LOSS_BUFFERS``) and the ``evidence``."""

    counter: str
    loss: str
    evidence: str


READOUTS: dict[str, Readout] = {
    "torchtitan": Readout(
        "reserved", "torch",
        "TorchTitan's benchmark tables copy its 'memory:' log line, which prints "
        "DeviceMemoryMonitor.max_reserved_gib, torch.cuda.memory_stats()['reserved_bytes.all."
        "peak'] (torchtitan/metrics.py at 9dec370; the file's footnote 1: the maximum over the "
        "GPUs); its loss is cross_entropy_loss, F.cross_entropy(pred.flatten(0, 1).float(), "
        "labels.flatten(0, 1)) in train.py (the log-softmax of FP32 logits, not Megatron's "
        "vocabulary-parallel loss)"),
}


def published_memory_gib(source: str, parts: Mapping[str, float]) -> float:
    """The memory per GPU (GiB) a row of ``source`` publishes, predicted from the evaluator's
    parts (bytes); ConfigError when the source's counter is not known."""
    if source not in READOUTS:
        raise ConfigError(f"memory_gib_per_gpu: which memory counter {source}'s figures read "
                          "(allocated, reserved or nvidia-smi) is not recorded "
                          "(ledger.memory.READOUTS); accepted sources: " + ", ".join(READOUTS))
    readout = READOUTS[source]
    return reported_bytes(parts, readout.counter, readout.loss) / 2**30
