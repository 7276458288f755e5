"""Where and how a profile runs: the device (CPU or a CUDA GPU), the precision (FP32, TF32,
or BF16/FP16 autocast), channels-last memory format, and what to do with parameters that get
no gradient.

Precisions: ``fp32`` runs as built (on a GPU with TF32 off for matmuls and cuDNN); ``tf32``
turns TF32 on (GPUs only: a tensor-core mode); ``bf16`` and ``fp16`` run the forward and the
loss under ``torch.autocast`` (weights and gradients stay FP32, as mixed-precision training
keeps them). On the CPU bf16 autocast runs; fp16 is refused: the CPU has no FP16 training
path worth timing (autocast converts to float16 around kernels that run in FP32 or emulated,
and FP16 training needs a GPU's loss scaling), so a CPU fp16 profile would describe no real
run. ``channels_last`` puts the module and its 4-D inputs in ``torch.channels_last``
(convolutional models; other tensors unchanged).

Unused parameters (``UNUSED_CHOICES``): a module may own parameters its loss never reaches,
e.g. Hugging Face ``BertModel``'s pooler under a loss on ``last_hidden_state``; DDP needs
``find_unused_parameters=True`` for it and marks their gradients ready at once. ``skip`` (the
default) profiles them as that: their backward takes no time and their gradient is ready when
the backward starts (their bytes stay in the profile, as DDP still all-reduces them);
``error`` refuses the module, naming the first such parameter.

torch is imported only when a profile runs (``resolve``), never when options are checked.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dlsched.errors import ConfigError

DEVICES = ("cpu", "cuda")
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
UNUSED_CHOICES = ("skip", "error")
_CPU_REFUSALS = {
    "tf32": "TF32 is a GPU tensor-core mode; on the CPU use fp32",
    "fp16": "the CPU has no FP16 training path worth timing (autocast would run FP32 or "
            "emulated kernels) and FP16 training needs a GPU's loss scaling; use bf16 on the "
            "CPU or --device cuda",
}


@dataclass(frozen=True)
class Execution:
    """A profile's ``device`` (cpu, cuda), ``precision`` (fp32, tf32, bf16, fp16),
    ``channels_last`` and ``unused`` (skip, error); see the module docstring."""

    device: str = "cpu"
    precision: str = "fp32"
    channels_last: bool = False
    unused: str = "skip"

    def __post_init__(self) -> None:
        for field, value, accepted in (("device", self.device, DEVICES),
                                       ("precision", self.precision, PRECISIONS),
                                       ("unused", self.unused, UNUSED_CHOICES)):
            if value not in accepted:
                raise ConfigError(f"{field}: {value!r}; accepted: {', '.join(accepted)}")
        if self.device == "cpu" and self.precision in _CPU_REFUSALS:
            raise ConfigError(f"precision: {self.precision} on the CPU is refused: "
                              f"{_CPU_REFUSALS[self.precision]}")

    @property
    def cuda(self) -> bool:
        """Whether the profile runs on a CUDA GPU (timed with CUDA events)."""
        return self.device == "cuda"

    def check_device(self) -> None:
        """ConfigError in one line when ``device`` is cuda and torch sees no CUDA GPU."""
        import torch

        if self.cuda and not torch.cuda.is_available():
            raise ConfigError(f"device: cuda is not available (torch {torch.__version__}, "
                              f"CUDA build {torch.version.cuda or 'none'}, "
                              f"{torch.cuda.device_count()} GPU(s) visible); accepted here: cpu")

    def prepare(self, module: Any, *tensors: Any) -> tuple[Any, ...]:
        """``module`` and ``tensors`` on the device (4-D float tensors and the module in
        channels-last when asked); returns (module, *tensors)."""
        import torch

        self.check_device()
        fmt = torch.channels_last if self.channels_last else torch.contiguous_format
        module = module.to(self.device, memory_format=fmt)
        moved = []
        for tensor in tensors:
            tensor = tensor.to(self.device)
            if self.channels_last and tensor.dim() == 4 and tensor.is_floating_point():
                tensor = tensor.contiguous(memory_format=torch.channels_last)
            moved.append(tensor)
        return (module, *moved)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Context for the timed passes: TF32 on or off (GPU), restored afterwards."""
        import torch

        if not self.cuda:
            yield
            return
        saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
        allow = self.precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = allow
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved

    def autocast(self) -> contextlib.AbstractContextManager:
        """``torch.autocast`` for bf16/fp16 (wrap the forward and the loss), else nothing."""
        import torch

        if self.precision not in ("bf16", "fp16"):
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(self.device, dtype=dtype)

    def describe(self) -> str:
        """One line for the CLI: ``cuda, bf16 autocast, channels-last``."""
        parts = [self.device, f"{self.precision} autocast" if self.precision in ("bf16", "fp16")
                 else self.precision]
        return ", ".join(parts + (["channels-last"] if self.channels_last else []))
