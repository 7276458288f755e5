"""A GPU's compute constants, per kernel class and precision, with the source of every one.

What a kernel costs on the GPU (``models.compute`` puts them together, ``models.kernels``
gives the shape factors):

* a GEMM: FLOP / (peak[precision] x efficiency.gemm[precision] x utilization), the
  utilization of its (M, N, K) by cuBLAS tiles in waves over ``sms`` SMs; at least its bytes
  / memory rate;
* a convolution: the implicit GEMM cuDNN runs, priced the same way with efficiency.conv (a
  16-bit convolution in NCHW layout also pays the NCHW <-> NHWC conversions, priced as
  memory traffic at ``transpose_efficiency`` of the bandwidth);
* fused attention: efficiency.attention of the peak (FlashAttention-2, what PyTorch's SDPA
  runs), with its wave quantization; Transformer Engine's cuDNN fused attention (Megatron-Core's
  ``--attention-backend fused``, what ``auto`` picks on Hopper) at efficiency.fused_attention,
  an optional kind of 16-bit entries only (a GPU without it refuses that kernel): the
  forward's rate on long rows of tiles at head dimension 128; ``fused_attention_kernel``
  (``hardware.attention_kernel``) gives the rest of that kernel's time (per query tile, the
  causal diagonal, the backward's rate, head dimension 64), priced by
  ``models.fused_attention``;
* everything else (norms, activations, dropout, additions, casts): bytes / memory rate, the
  rate being memory_bandwidth x memory_efficiency.

``kernel_overhead`` is the host's CPU time to launch one kernel of the forward from eager
PyTorch (Python module, dispatcher, autograd recording), ``backward_overhead`` one of the
backward (the autograd engine, in C++); both overlap the GPU's work (``models.timeline``).

``peak`` is the datasheet's dense FLOP/s of a precision: ``fp32`` (CUDA cores), ``tf32``,
``bf16`` (also fp16's: the same tensor cores), ``fp8`` (Hopper; Transformer Engine's FP8
GEMMs, the rest in bf16), ``fp4`` (Blackwell's block-scaled FP4 tensor cores: NVFP4 GEMMs,
which only the job planner's ``nvfp4`` recipe runs, ``job.compute.nvfp4``; the rest in bf16).
``LOW_PRECISIONS`` (fp8, fp4) give a GEMM rate alone: their other kinds run at bf16's.
Presets (``v100``, ``a100``, ``h100``, ``h100-hbm2e-96gb``, ``h800``, ``h200``, ``b200``,
``gb200``, ``b300``, ``gb300``, ``mi300x``) live in ``presets/gpus.yaml``, each with its
``memory`` (bytes) and the ``provenance`` of its constants (``PROVENANCES``); a user's own
GPU is the same document in a YAML/JSON file (``dlsched compute calibrate`` and ``dlsched
compute measure`` write one).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dlsched.config import bundled_presets, load_document, validate
from dlsched.errors import ConfigError
from dlsched.hardware.attention_kernel import FusedAttentionKernel
from dlsched.validation import Bandwidth, ByteSize, FlopRate, Fraction, Seconds

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
KINDS = ("gemm", "attention", "conv", "elementwise")
# Kinds a GPU document may leave out, and the one precision key they take (cuDNN's fused
# attention runs 16-bit inputs only).
OPTIONAL_KINDS = {"fused_attention": "bf16"}
# Precisions that run only their GEMMs in that format (the other kinds at bf16's rate).
LOW_PRECISIONS = ("fp8", "fp4")
# Bytes of an activation element: fp8 and fp4 run everything but their GEMMs in bf16.
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 2, "fp4": 2}
# Bytes of a GEMM operand element; fp4: NVFP4's E2M1 half byte and one E4M3 scale byte per 16
# elements (transformer_engine/common/recipe/__init__.py at v2.12, NVFP4BlockScaling).
OPERAND_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5 + 1 / 16}
# Where a precision reads its constants: fp16 shares bf16's tensor cores and peak.
KEY = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "bf16", "fp8": "fp8",
       "fp4": "fp4"}
OPTIONAL = ("tf32", "bf16", "fp8", "fp4")
# How a constant's value was obtained (``GpuSpec.provenance``): from the vendor's datasheet,
# measured on this GPU model (``compute measure`` / ``compute calibrate`` on its own steps),
# fitted on one named ledger row of this GPU (the others held out), transferred from another
# GPU by a published ratio, or assumed equal to another GPU's without one (unvalidated).
Provenance = Literal["datasheet", "measured", "fitted", "transferred", "assumed"]
PROVENANCES: tuple[str, ...] = get_args(Provenance)


class KindEfficiency(BaseModel):
    """Fraction of the precision's peak one kind reaches at a large shape, per precision
    (absent: unsupported; ``fp32`` is needed by every kind but the optional ones)."""

    model_config = ConfigDict(extra="forbid")
    fp32: Fraction | None = None
    tf32: Fraction | None = None
    bf16: Fraction | None = None
    fp8: Fraction | None = None
    fp4: Fraction | None = None


class GpuSpec(BaseModel):
    """One GPU document (see the module docstring); ``memory``: its capacity (bytes);
    ``sources`` maps a constant's name to where its value comes from, ``provenance`` to how it
    was obtained (``PROVENANCES``)."""

    model_config = ConfigDict(extra="forbid")
    name: str
    description: str = ""
    peak: dict[str, FlopRate]
    sms: int = Field(ge=1, le=1024)
    memory_bandwidth: Bandwidth
    memory_efficiency: Fraction
    transpose_efficiency: Fraction
    kernel_overhead: Seconds
    backward_overhead: Seconds
    efficiency: dict[str, KindEfficiency]
    half_precisions: list[Literal["bf16", "fp16"]] = Field(default=["bf16", "fp16"],
                                                           min_length=1)
    best_published_utilization: Fraction | None = None
    fused_attention_kernel: FusedAttentionKernel | None = None
    memory: ByteSize | None = None
    sources: dict[str, str] = Field(default_factory=dict)
    provenance: dict[str, Provenance] = Field(default_factory=dict)

    def __hash__(self) -> int:
        """By name and memory: equal documents hash alike, so a GPU keys the compute caches as
        its preset name did (``job.cluster.System.gpu``)."""
        return hash((self.name, self.memory))

    def __str__(self) -> str:
        """The GPU's name, as messages and titles print it."""
        return self.name

    @model_validator(mode="after")
    def _provenance_keys(self) -> GpuSpec:
        unknown = sorted(key for key in self.provenance
                         if key.split(".")[0] not in type(self).model_fields
                         or key.split(".")[0] in ("name", "description", "sources",
                                                  "provenance"))
        if unknown:
            raise ValueError(f"provenance: {unknown} name no constant of the GPU document")
        return self

    @model_validator(mode="after")
    def _complete(self) -> GpuSpec:
        unknown = sorted(set(self.peak) - {"fp32", *OPTIONAL})
        if unknown or "fp32" not in self.peak:
            raise ValueError("peak: needs fp32 and optionally tf32, bf16, fp8, fp4 "
                             f"(got {sorted(self.peak)})")
        for low in LOW_PRECISIONS:
            if low in self.peak and "bf16" not in self.peak:
                raise ValueError(f"peak.{low}: needs peak.bf16 too ({low} runs its non-GEMM "
                                 "ops in bf16)")
        if self.fused_attention_kernel is not None and "fused_attention" not in self.efficiency:
            raise ValueError("fused_attention_kernel: given without efficiency.fused_attention "
                             "(the kernel's forward rate)")
        missing = [kind for kind in KINDS if kind not in self.efficiency]
        extra = sorted(set(self.efficiency) - set(KINDS) - set(OPTIONAL_KINDS))
        if missing or extra:
            raise ValueError(f"efficiency: needs the kinds {', '.join(KINDS)}, optionally "
                             f"{', '.join(OPTIONAL_KINDS)} (missing {missing}, unknown {extra})")
        for kind, table in self.efficiency.items():
            if kind in OPTIONAL_KINDS:
                only = OPTIONAL_KINDS[kind]
                given = sorted(key for key in ("fp32", *OPTIONAL)
                               if getattr(table, key) is not None)
                if given != [only] or only not in self.peak:
                    raise ValueError(f"efficiency.{kind}: takes {only} alone, with peak.{only} "
                                     f"(got {given})")
                continue
            if table.fp32 is None:
                raise ValueError(f"efficiency.{kind}.fp32: needed")
            for key in OPTIONAL:
                needed = key in self.peak and (key not in LOW_PRECISIONS or kind == "gemm")
                if needed and getattr(table, key) is None:
                    raise ValueError(f"efficiency.{kind}.{key}: needed as peak.{key} is given")
                if key not in self.peak and getattr(table, key) is not None:
                    raise ValueError(f"efficiency.{kind}.{key}: given without peak.{key}")
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
        keys = [p for p in PRECISIONS if KEY[p] in self.spec.peak
                and (KEY[p] != "bf16" or p in self.spec.half_precisions)]
        return tuple(keys)

    def check_precision(self, precision: str) -> str:
        """``precision`` if this GPU runs it, else ConfigError listing what it runs."""
        if precision not in self.precisions():
            raise ConfigError(f"precision: {precision!r} is not run by {self.name}; accepted: "
                              + ", ".join(self.precisions()))
        return precision

    def peak_flops(self, precision: str) -> float:
        """Dense FLOP/s of the tensor-core (or, for fp32, CUDA-core) peak of ``precision``."""
        return float(self.spec.peak[KEY[self.check_precision(precision)]])

    def efficiency(self, kind: str, precision: str) -> float:
        """Fraction of the peak that large ops of ``kind`` reach in ``precision`` (fp8, fp4:
        only GEMMs run in that format, the other kinds take bf16's)."""
        if kind not in (*KINDS, *OPTIONAL_KINDS):
            raise ConfigError(f"op kind: {kind!r} is not one of "
                              + ", ".join((*KINDS, *OPTIONAL_KINDS)))
        key = KEY[self.check_precision(precision)]
        if key in LOW_PRECISIONS and kind != "gemm":
            key = "bf16"
        table = self.spec.efficiency.get(kind)
        value = None if table is None else getattr(table, key)
        if value is None:
            raise ConfigError(f"efficiency.{kind}.{key}: {self.name} gives no rate for this "
                              f"kernel in {precision}" + (
                                  "; Transformer Engine's cuDNN fused attention needs a 16-bit "
                                  "precision and a GPU file that measures it (else use "
                                  "--attention flash)" if kind in OPTIONAL_KINDS else ""))
        return float(value)

    def kind_rate(self, kind: str, precision: str) -> float:
        """Achieved FLOP/s of a large op of ``kind`` in ``precision``: the peak (fp32's for
        elementwise ops, bf16's for non-GEMM ops in fp8 or fp4) x the kind's efficiency."""
        if kind == "elementwise":
            peak = self.peak_flops("fp32")
        elif KEY[precision] in LOW_PRECISIONS and kind != "gemm":
            peak = float(self.spec.peak["bf16"])
        else:
            peak = self.peak_flops(precision)
        return peak * self.efficiency(kind, precision)

    @property
    def memory_rate(self) -> float:
        """Achieved bytes/s of memory-bound kernels."""
        return self.spec.memory_bandwidth * self.spec.memory_efficiency


def _presets() -> dict[str, Any]:
    return bundled_presets("gpus.yaml")


def preset_for(device_name: str) -> str | None:
    """The bundled preset of a CUDA device name (``NVIDIA H100 80GB HBM3`` -> h100), if any."""
    for preset in ("h200", "h100", "h800", "gb300", "b300", "gb200", "b200", "mi300x", "a100",
                   "v100"):
        if preset in device_name.lower():
            return preset
    return None


def gpu_from_data(data: Any, source: str) -> Gpu:
    """Validate one GPU document."""
    return Gpu(validate(GpuSpec, data, source))


@cache
def _preset_gpu(name: str) -> Gpu:
    """A bundled preset, validated once per process (the job evaluator asks for it per
    pipeline rank; a preset does not change while dlsched runs, a GPU file is read anew)."""
    return gpu_from_data({"name": name, **_presets()[name]}, f"GPU preset {name}")


def get_gpu(name_or_path: str | Path | GpuSpec) -> Gpu:
    """A bundled preset by name (``presets/gpus.yaml``), a YAML/JSON GPU file, or a GPU
    document already validated (a system's ``gpu``). An unknown name: ConfigError of field
    ``device`` (a caller taking it through another option names that: ``renamed``)."""
    if isinstance(name_or_path, GpuSpec):
        return Gpu(name_or_path)
    key = str(name_or_path)
    presets = _presets()
    if key in presets:
        return _preset_gpu(key)
    if Path(key).suffix.lower() in {".yaml", ".yml", ".json"}:
        data = load_document(key)
        if isinstance(data, dict):
            data = {"name": Path(key).stem, **data}
        return gpu_from_data(data, key)
    raise ConfigError(f"unknown GPU {key!r}; accepted: " + ", ".join(presets)
                      + " or a .yaml/.json GPU file", "device")
