"""Memory per GPU as each ledger source measured it: which counter its figure reads and how its
runs compute the loss, so that ``dlsched validate`` prices the quantity that was published
(``job.memory.allocator``), not the evaluator's own total.

``READOUTS`` holds, per source whose rows publish ``memory_gib_per_gpu``, the counter
(``allocated``, ``reserved`` or ``device``), the loss implementation its runs use
(``job.memory.allocator.LOSS_BUFFERS``: ``megatron``, ``torch``), the rows whose framework
version compiles that loss under ``torch.compile`` (``compiled``), and the evidence. A memory
row of a source not listed is refused with that reason: a number whose meaning is unknown is
not scored.

``memory_unmodelled`` says why a row's memory is not priced though its time is: what
``job.memory.torch_runtime.check_runtime`` refuses. Transformer Engine's FP8 recipes are
priced (``job.memory.te_fp8_stash``: the linears' quantized saved inputs;
``job.memory.fp8_weights``: their FP8 weight copies and Megatron-Core's FP8 primary weights);
no source with a known readout publishes such a row yet.
FSDP2 under ``torch.distributed.pipelining`` is priced: its unsharded FP32 gradient
accumulation (``job.memory.torch_runtime``) and the stage's own buffers
(``job.memory.pipeline_buffers``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlsched.errors import ConfigError
from dlsched.job.memory.allocator import fragmentation_margin, reported_bytes
from dlsched.job.memory.torch_runtime import Runtime, check_runtime

if TYPE_CHECKING:  # annotations only: ledger.schema reads sharding_of (no import circle)
    from dlsched.ledger.schema import LedgerRow


@dataclass(frozen=True)
class Readout:
    """What a source's memory figure is: the allocator ``counter``, the runs' ``loss``
    implementation (``job.memory.allocator.LOSS_BUFFERS``), the id prefixes of the rows whose
    framework version compiles the loss when the row runs ``torch.compile``
    (``compiled_loss``), the ``evidence``, and the id prefixes of the rows whose framework
    version wraps FSDP2 units in the split way (``split_wrap``: ``torch_runtime``'s
    ``fsdp2-split``)."""

    counter: str
    loss: str
    compiled_loss: tuple[str, ...]
    evidence: str
    split_wrap: tuple[str, ...] = ()

    def loss_of(self, row: LedgerRow) -> str:
        """The loss implementation ``row`` ran: compiled where its version compiles it, else
        with TP > 1 PyTorch's loss as DTensor's ``loss_parallel`` runs it (``parallel``)."""
        compiled = row.parallel.torch_compile and row.id.startswith(self.compiled_loss)
        if compiled:
            return "compiled"
        return "parallel" if self.loss == "torch" and row.parallel.tp > 1 else self.loss


READOUTS: dict[str, Readout] = {
    "torchtitan": Readout(
        "reserved", "torch", ("torchtitan-2506-h200-", "torchtitan-2508-"),
        "TorchTitan's benchmark tables copy its 'memory:' log line, which prints "
        "DeviceMemoryMonitor.max_reserved_gib, torch.cuda.memory_stats()['reserved_bytes.all."
        "peak'] (torchtitan/metrics.py at 9dec370; the file's footnote 1: the maximum over the "
        "GPUs); its loss is cross_entropy_loss, F.cross_entropy(pred.flatten(0, 1).float(), "
        "labels.flatten(0, 1)) in train.py (the log-softmax of FP32 logits, not Megatron's "
        "vocabulary-parallel loss), left eager at 9dec370, the 2412 rows' commit ('TODO: "
        "compiling loss function causes CUDA errors, turning off for now'), compiled with the "
        "model under training.compile at e7c0cae, the H200 rows' commit, and at 6fc499f, the "
        "B200 rows' (torchtitan/components/loss.py, build_cross_entropy_loss; torchao's "
        "benchmarks/float8/training/parse_torchtitan_logs.py reads the same 'memory:' GiB, "
        "the maximum over the steps of rank 0's log); with TP > 1 under "
        "loss_parallel (ParallelDims.loss_parallel_enabled: TP > 1 unless "
        "--training.disable_loss_parallel); FSDP2 wrapped as torchtitan/models/llama3/infra/"
        "parallelize.py apply_fsdp at 6fc499f (after 83e6941, 2025-07-28) for the B200 rows; "
        "the B200 rows launched by torchao's benchmarks/float8/training/llama3.sh through "
        "torchtitan's run_train.sh, which sets PYTORCH_CUDA_ALLOC_CONF="
        "'expandable_segments:True' at 6fc499f (since a5e57e4, 2024-10-22); the H200 rows by "
        "the torchrun command their file prints (no allocator setting); the Dec 2024 rows' "
        "launch is not published (the default allocator assumed); torchao's float8 README "
        "rows (issue 48): the H100 ones ran torchtitan 0.0.2 between 069bae2 and 54ef422 "
        "(2025-02-27 to 03-12: loss eager, FSDP2 unsplit) through run_train.sh with "
        "expandable segments; the MI300X ones torchtitan 2c8b594 (2025-08-08: loss compiled, "
        "FSDP2 split) through the same run_train.sh, whose setting a ROCm build of that time "
        "ignores ('expandable_segments not supported on this platform', "
        "c10/hip/HIPAllocatorConfig.h; ROCm support came with pytorch/pytorch PR #169068, "
        "2025-11): the default allocator",
        ("torchtitan-2508-",)),
}


def sharding_of(row: LedgerRow) -> str:
    """ZeRO 3's sharding as ``row``'s framework runs it (``job.memory.torch_runtime``):
    ``zero`` unless the row runs FSDP; TorchTitan's wrapping of its version."""
    if row.parallel.zero != "fsdp":
        return "zero"
    readout = READOUTS.get(row.source)
    split = readout is not None and row.id.startswith(readout.split_wrap)
    return "fsdp2-split" if split else "fsdp2"


def published_memory_gib(row: LedgerRow, parts: Mapping[str, float]) -> float:
    """The memory per GPU (GiB) ``row`` publishes, predicted from the evaluator's parts
    (bytes); ConfigError when its source's counter is not known."""
    if row.source not in READOUTS:
        raise ConfigError(f"memory_gib_per_gpu: which memory counter {row.source}'s figures "
                          "read (allocated, reserved or nvidia-smi) is not recorded "
                          "(ledger.memory.READOUTS); accepted sources: " + ", ".join(READOUTS))
    readout = READOUTS[row.source]
    return reported_bytes(parts, readout.counter, readout.loss_of(row),
                          fragmentation_margin(row.parallel.expandable_segments)) / 2**30


def memory_unmodelled(row: LedgerRow) -> str | None:
    """Why ``row``'s memory is not priced though its time is (None when it is; module
    docstring)."""
    par = row.parallel
    runtime = Runtime(sharding_of(row), par.torch_compile, par.fp8_all_gather)
    why = check_runtime(runtime, par.precision, par.recompute or "none")
    return None if why is None else "memory: the memory model does not count " + why
