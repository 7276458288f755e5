"""A GPU's compute model, calibrated per op kind and precision, with the source of every constant.

One op (a kernel, or a few of the same kind) costs

    seconds = max(FLOP / (peak[precision] x efficiency[kind][precision]),
                  bytes / (memory_bandwidth x memory_efficiency))
              + kernels x kernel_overhead

``peak`` is the datasheet's dense FLOP/s of the precision the op runs in: ``fp32`` (CUDA
cores), ``tf32`` and ``bf16``/``fp16`` (tensor cores; fp16 shares bf16's constants);
elementwise ops run on the CUDA cores at the fp32 peak whatever the precision. Kinds: ``gemm``
(matrix products), ``attention`` (the attention core's batched products), ``conv``
(convolutions) and ``elementwise`` (norms, activations, dropout, additions, copies; bound by
memory). ``kernel_overhead`` is what eager PyTorch adds per kernel launched (Python and
dispatcher time that the GPU waits for when kernels are short).

Presets (``v100``, ``a100``, ``h100``) live in ``presets/gpus.yaml``: datasheet peaks and
bandwidth, efficiencies and overhead fitted to measurements or published throughputs, each with
its source. A user's own preset is the same document in a YAML/JSON file (``dlsched compute
calibrate`` writes one).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dlsched.config import bundled_presets, load_document, validate
from dlsched.errors import ConfigError
from dlsched.validation import Bandwidth, FlopRate, Fraction, Seconds

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
KINDS = ("gemm", "attention", "conv", "elementwise")
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}
# Where fp16 reads its constants: the same tensor cores and peak as bf16.
_KEY = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "bf16"}
TENSOR_KINDS = ("gemm", "attention", "conv")


class KindEfficiency(BaseModel):
    """Fraction of the precision's peak one kind reaches, per precision (absent: unsupported)."""

    model_config = ConfigDict(extra="forbid")
    fp32: Fraction
    tf32: Fraction | None = None
    bf16: Fraction | None = None


class GpuSpec(BaseModel):
    """One GPU document (see the module docstring); ``sources`` maps a constant's name to
    where its value comes from."""

    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    peak: dict[str, FlopRate]
    memory_bandwidth: Bandwidth
    memory_efficiency: Fraction
    kernel_overhead: Seconds
    efficiency: dict[str, KindEfficiency]
    nchw_half_conv_efficiency: Fraction | None = None
    half_precisions: list[Literal["bf16", "fp16"]] = Field(default=["bf16", "fp16"],
                                                           min_length=1)
    best_published_utilization: Fraction | None = None
    sources: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _complete(self) -> GpuSpec:
        unknown = sorted(set(self.peak) - {"fp32", "tf32", "bf16"})
        if unknown or "fp32" not in self.peak:
            raise ValueError("peak: needs fp32 and optionally tf32, bf16 "
                             f"(got {sorted(self.peak)})")
        missing = [kind for kind in KINDS if kind not in self.efficiency]
        extra = sorted(set(self.efficiency) - set(KINDS))
        if missing or extra:
            raise ValueError(f"efficiency: needs exactly the kinds {', '.join(KINDS)} "
                             f"(missing {missing}, unknown {extra})")
        for kind, table in self.efficiency.items():
            for key in ("tf32", "bf16"):
                if (getattr(table, key) is None) != (key not in self.peak):
                    raise ValueError(f"efficiency.{kind}.{key}: give it exactly when peak.{key} "
                                     "is given")
        return self


@dataclass(frozen=True)
class Gpu:
    """A validated GPU compute model (units: FLOP/s, bytes/s, seconds)."""

    spec: GpuSpec

    @property
    def name(self) -> str:
        """The preset's or file's name."""
        return self.spec.name

    def precisions(self) -> tuple[str, ...]:
        """The precisions this GPU runs (the 16-bit ones its ``half_precisions`` name; their
        constants are the ``bf16`` entries)."""
        keys = [p for p in PRECISIONS if _KEY[p] in self.spec.peak
                and (_KEY[p] != "bf16" or p in self.spec.half_precisions)]
        return tuple(keys)

    def check_precision(self, precision: str) -> str:
        """``precision`` if this GPU runs it, else ConfigError listing what it runs."""
        if precision not in self.precisions():
            raise ConfigError(f"precision: {precision!r} is not run by {self.name}; accepted: "
                              + ", ".join(self.precisions()))
        return precision

    def peak_flops(self, precision: str) -> float:
        """Dense FLOP/s of the tensor-core (or, for fp32, CUDA-core) peak of ``precision``."""
        return float(self.spec.peak[_KEY[self.check_precision(precision)]])

    def efficiency(self, kind: str, precision: str) -> float:
        """Fraction of the peak that ops of ``kind`` reach in ``precision``."""
        if kind not in KINDS:
            raise ConfigError(f"op kind: {kind!r} is not one of " + ", ".join(KINDS))
        value = getattr(self.spec.efficiency[kind], _KEY[self.check_precision(precision)])
        return float(value)

    def kind_rate(self, kind: str, precision: str, channels_last: bool = True) -> float:
        """Achieved FLOP/s of ``kind`` in ``precision``; elementwise ops run at the fp32 peak;
        a 16-bit convolution in NCHW layout (not ``channels_last``) at
        ``nchw_half_conv_efficiency`` when given (cuDNN transposes it for the tensor cores)."""
        peak = self.peak_flops("fp32" if kind == "elementwise" else precision)
        nchw = self.spec.nchw_half_conv_efficiency
        if kind == "conv" and _KEY[precision] == "bf16" and not channels_last and nchw:
            return peak * nchw
        return peak * self.efficiency(kind, precision)

    @property
    def memory_rate(self) -> float:
        """Achieved bytes/s of memory-bound kernels."""
        return self.spec.memory_bandwidth * self.spec.memory_efficiency

    def op_seconds(self, kind: str, precision: str, flops: float, num_bytes: float,
                   kernels: float, channels_last: bool = True) -> float:
        """Seconds of ``kernels`` kernels of ``kind`` doing ``flops`` FLOP and moving
        ``num_bytes`` bytes (see the module docstring)."""
        compute = flops / self.kind_rate(kind, precision, channels_last) if flops else 0.0
        return max(compute, num_bytes / self.memory_rate) + kernels * self.spec.kernel_overhead


def _presets() -> dict[str, Any]:
    return bundled_presets("gpus.yaml")


def gpu_names() -> list[str]:
    """Names of the bundled GPU presets."""
    return list(_presets())


def gpu_from_data(data: Any, source: str) -> Gpu:
    """Validate one GPU document."""
    return Gpu(validate(GpuSpec, data, source))


def get_gpu(name_or_path: str | Path) -> Gpu:
    """A bundled preset by name (``v100``, ``a100``, ``h100``) or a YAML/JSON GPU file."""
    key = str(name_or_path)
    presets = _presets()
    if key in presets:
        return gpu_from_data({"name": key, **presets[key]}, f"GPU preset {key}")
    if Path(key).suffix.lower() in {".yaml", ".yml", ".json"}:
        data = load_document(key)
        if isinstance(data, dict):
            data = {"name": Path(key).stem, **data}
        return gpu_from_data(data, key)
    raise ConfigError(f"device: unknown GPU {key!r}; accepted: " + ", ".join(presets)
                      + " or a .yaml/.json GPU file")
