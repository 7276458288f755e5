"""Layer compute times from FLOPs: a device's peak rate times an achieved efficiency.

Named devices come in two kinds. Calibrated presets (``v100-fp32``, ``v100-amp``) take their
efficiency from a published training throughput: the efficiency at which the reference model
(ResNet-50 from the zoo, backward = ``backward_ratio`` x forward) trains at exactly the published
samples/s, the source being quoted in the preset. Peak-only entries (``v100``, ``a100``,
``h100``, ``rtx3090``) use the dense FP16/BF16 tensor-core peak times a user-given efficiency,
which easily overstates real training speed (V100 at 40% of 125 TFLOP/s trains ResNet-50 at
about 2,000 img/s, against 356 img/s published in FP32 and 1,156 img/s with mixed precision).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dlsched.errors import ConfigError
from dlsched.models.layer import Layer, Model
from dlsched.validation import FLOP_RATE, FRACTION, RATIO


@dataclass(frozen=True)
class ComputeModel:
    """A device: ``peak_flops`` FLOP/s at ``efficiency`` (0-1]; backward costs
    ``backward_ratio`` x forward unless a layer gives its own time."""

    peak_flops: float
    efficiency: float = 0.5
    backward_ratio: float = 2.0

    def __post_init__(self) -> None:
        FLOP_RATE.check(self.peak_flops, "peak_flops")
        FRACTION.check(self.efficiency, "efficiency")
        RATIO.check(self.backward_ratio, "backward_ratio")

    def forward_time(self, layer: Layer, batch_size: int) -> float:
        """Forward seconds of ``layer`` for ``batch_size`` samples (profiled time if given)."""
        if layer.forward_time is not None:
            return layer.forward_time
        return layer.forward_flops * batch_size / (self.peak_flops * self.efficiency)

    def backward_time(self, layer: Layer, batch_size: int) -> float:
        """Backward seconds (profiled time if given, else backward_ratio x forward)."""
        if layer.backward_time is not None:
            return layer.backward_time
        return self.backward_ratio * self.forward_time(layer, batch_size)

    def layer_times(self, model: Model, batch_size: int) -> tuple[list[float], list[float]]:
        """Forward and backward seconds of every layer, in forward order."""
        return ([self.forward_time(layer, batch_size) for layer in model.layers],
                [self.backward_time(layer, batch_size) for layer in model.layers])


# Dense FP16/BF16 tensor-core peaks (FLOP/s) of common accelerators.
DEVICE_PEAKS = {"v100": 125e12, "a100": 312e12, "h100": 989e12, "rtx3090": 71e12}


@dataclass(frozen=True)
class CalibratedDevice:
    """A device whose efficiency reproduces a published training throughput: ``peak_flops``
    (FLOP/s of the precision used), ``throughput`` samples/s of zoo model ``reference`` on one
    device, and the ``source`` of that figure."""

    peak_flops: float
    reference: str
    throughput: float
    source: str

    def efficiency(self, backward_ratio: float) -> float:
        """Fraction of peak at which ``reference`` trains at ``throughput`` samples/s."""
        from dlsched.models.zoo import get_model

        flops = sum(layer.forward_flops for layer in get_model(self.reference).layers)
        return self.throughput * flops * (1 + backward_ratio) / self.peak_flops


CALIBRATED = {
    "v100-fp32": CalibratedDevice(
        15.7e12, "resnet50", 356.0,
        "NVIDIA's published PyTorch ResNet-50 v1.5 training throughput on one V100 16GB, FP32: "
        "about 356 img/s (figure quoted in dlsched issue 9 and docs/dataparallel.md); "
        "peak: V100 SXM2 FP32, 15.7 TFLOP/s"),
    "v100-amp": CalibratedDevice(
        125e12, "resnet50", 1156.0,
        "NVIDIA's published PyTorch ResNet-50 v1.5 training throughput on one V100 16GB, mixed "
        "precision: about 1,156 img/s (figure quoted in dlsched issue 9); peak: V100 tensor "
        "cores, 125 TFLOP/s"),
}
DEVICES = (*CALIBRATED, *DEVICE_PEAKS)


def device_compute(name: str, efficiency: float | None = None,
                   backward_ratio: float = 2.0) -> ComputeModel:
    """A ComputeModel for a named device: a calibrated preset (``v100-fp32``, ``v100-amp``;
    ``efficiency`` overrides the calibrated one) or a peak-only accelerator (``v100``,
    ``a100``, ``h100``, ``rtx3090``; efficiency default 0.5)."""
    if name in CALIBRATED:
        preset = CALIBRATED[name]
        return ComputeModel(preset.peak_flops, efficiency if efficiency is not None
                            else preset.efficiency(backward_ratio), backward_ratio)
    if name not in DEVICE_PEAKS:
        raise ConfigError(f"device: unknown accelerator {name!r}; accepted: " + ", ".join(DEVICES))
    return ComputeModel(DEVICE_PEAKS[name], 0.5 if efficiency is None else efficiency,
                        backward_ratio)


@dataclass(frozen=True)
class Roofline:
    """A device roofline: an op takes max(FLOP / ``peak_flops``, bytes moved /
    ``memory_bandwidth``) seconds. The default is an A100-like FP16 device (312 TFLOP/s dense
    tensor cores, 2.039 TB/s HBM2e of the 80 GB SXM part)."""

    peak_flops: float = 312e12
    memory_bandwidth: float = 2.039e12

    def __post_init__(self) -> None:
        for field in ("peak_flops", "memory_bandwidth"):
            value = getattr(self, field)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{field}: must be a finite number > 0 (got {value!r})")

    def op_time(self, flops: float, num_bytes: float) -> float:
        """Seconds of one op of ``flops`` FLOP touching ``num_bytes`` bytes of memory."""
        return max(flops / self.peak_flops, num_bytes / self.memory_bandwidth)
