"""Layer compute times from FLOPs: a device's peak rate times an achieved efficiency."""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.errors import ConfigError
from dlsched.models.layer import Layer, Model


@dataclass(frozen=True)
class ComputeModel:
    """A device: ``peak_flops`` FLOP/s at ``efficiency`` (0-1]; backward costs
    ``backward_ratio`` x forward unless a layer gives its own time."""

    peak_flops: float
    efficiency: float = 0.5
    backward_ratio: float = 2.0

    def __post_init__(self) -> None:
        if not self.peak_flops > 0:
            raise ConfigError(f"peak_flops: must be > 0 FLOP/s (got {self.peak_flops!r})")
        if not 0 < self.efficiency <= 1:
            raise ConfigError(f"efficiency: must be in (0, 1] (got {self.efficiency!r})")
        if not self.backward_ratio > 0:
            raise ConfigError(f"backward_ratio: must be > 0 (got {self.backward_ratio!r})")

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


def device_compute(name: str, efficiency: float = 0.5) -> ComputeModel:
    """A ComputeModel for a named accelerator (``v100``, ``a100``, ``h100``, ``rtx3090``)."""
    if name not in DEVICE_PEAKS:
        raise ConfigError(f"device: unknown accelerator {name!r}; accepted: "
                          + ", ".join(DEVICE_PEAKS))
    return ComputeModel(DEVICE_PEAKS[name], efficiency)
