"""Layer compute times: the calibrated per-op GPU model, or a user's own FLOP/s.

``CalibratedCompute`` prices every op a zoo layer lists (``models.ops``) on a GPU preset
(``hardware.gpu``: peak x efficiency of the op's kind and precision, memory bandwidth, per-kernel
overhead of eager execution), forward and backward, at a precision. Under ``autocast``
(``torch.autocast``, FP32 weights) each weighted product also casts its weight to 16 bits in the
forward and its gradient back in the backward; a 16-bit convolution in NCHW layout (not
``channels_last``) transposes its input and output to the tensor cores' NHWC and back.

``ComputeModel`` is the plain alternative a user asks for explicitly: ``peak_flops`` x
``efficiency`` for every layer, backward = ``backward_ratio`` x forward.

``device_compute(name)`` gives the calibrated model of a named device: ``v100``, ``a100``,
``h100`` (default precision: bf16, fp16 on the V100) or ``NAME-PRECISION`` (``h100-tf32``;
``v100-amp`` is ``v100-fp16``); a GPU file path works too. An explicit ``efficiency`` gives the
user's ``ComputeModel`` instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dlsched.errors import ConfigError
from dlsched.hardware.gpu import ELEMENT_BYTES, TENSOR_KINDS, Gpu, get_gpu
from dlsched.models.layer import Layer, Model
from dlsched.models.ops import BACKWARD_FACTOR, Op
from dlsched.validation import FLOP_RATE, FRACTION, RATIO

HALF = ("bf16", "fp16")
CAST_BYTES = 6  # an autocast cast reads 4 bytes and writes 2 per element


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


@dataclass(frozen=True)
class CalibratedCompute:
    """Op-level times on ``gpu`` in ``precision`` (see the module docstring).
    ``tensor_parallel`` prices one GPU of a Megatron-LM tensor-parallel group of that size
    (``Op.split`` work divided, the rest repeated unless ``sequence_parallel``)."""

    gpu: Gpu
    precision: str = "bf16"
    autocast: bool = True
    channels_last: bool = False
    tensor_parallel: int = 1
    sequence_parallel: bool = False

    def __post_init__(self) -> None:
        self.gpu.check_precision(self.precision)
        if not 1 <= self.tensor_parallel <= 1024:
            raise ConfigError(f"tensor_parallel: {self.tensor_parallel} must be in 1..1024")

    def op_time(self, op: Op, batch_size: float, backward: bool = False) -> float:
        """Seconds of ``op`` on ``batch_size`` samples, forward or ``backward``."""
        scale = BACKWARD_FACTOR if backward else 1.0
        share = 1.0 / self.tensor_parallel if op.split or self.sequence_parallel else 1.0
        element = ELEMENT_BYTES[self.precision]
        activations = op.elements * batch_size * share
        weights = op.weights / self.tensor_parallel if op.split else op.weights
        seconds = self.gpu.op_seconds(op.kind, self.precision, scale * op.flops * batch_size
                                      * share, scale * (activations + weights) * element,
                                      scale * op.kernels, self.channels_last)
        half = self.precision in HALF
        if half and self.autocast and op.kind in TENSOR_KINDS and op.weights:
            seconds += self.gpu.op_seconds("elementwise", self.precision, 0.0,
                                           weights * CAST_BYTES, 1.0)
        return seconds

    def _layer_seconds(self, layer: Layer, batch_size: int, backward: bool) -> float:
        if not layer.ops and layer.forward_flops:
            return self.op_time(Op("gemm", layer.forward_flops, kernels=0), batch_size, backward)
        return sum(self.op_time(op, batch_size, backward) for op in layer.ops)

    def forward_time(self, layer: Layer, batch_size: int) -> float:
        """Forward seconds of ``layer`` for ``batch_size`` samples (profiled time if given)."""
        if layer.forward_time is not None:
            return layer.forward_time
        return self._layer_seconds(layer, batch_size, backward=False)

    def backward_time(self, layer: Layer, batch_size: int) -> float:
        """Backward seconds of ``layer`` (profiled time if given)."""
        if layer.backward_time is not None:
            return layer.backward_time
        return self._layer_seconds(layer, batch_size, backward=True)

    def layer_times(self, model: Model, batch_size: int) -> tuple[list[float], list[float]]:
        """Forward and backward seconds of every layer, in forward order."""
        return ([self.forward_time(layer, batch_size) for layer in model.layers],
                [self.backward_time(layer, batch_size) for layer in model.layers])

    @property
    def peak_flops(self) -> float:
        """The precision's dense peak FLOP/s (what MFU divides by)."""
        return self.gpu.peak_flops(self.precision)


def training_flops(model: Model, batch_size: int) -> float:
    """Model FLOP of one training step (forward + backward = 3 x forward) on ``batch_size``
    samples, without recomputation: the numerator of MFU."""
    return 3.0 * batch_size * sum(layer.forward_flops for layer in model.layers)


def mfu(model_flops: float, seconds: float, gpus: int, peak_flops: float) -> float:
    """Model FLOPs utilization: ``model_flops`` done in ``seconds`` on ``gpus`` GPUs of
    ``peak_flops`` FLOP/s each, as a fraction of their peak."""
    if not seconds > 0 or not math.isfinite(seconds):
        raise ConfigError(f"seconds: {seconds!r} must be a finite number > 0")
    return model_flops / (seconds * gpus * peak_flops)


LEGACY = {"v100-amp": ("v100", "fp16")}


def parse_device(name: str) -> tuple[str, str | None]:
    """(GPU preset or file, precision or None) of ``v100``, ``h100-tf32``, ``v100-amp``,
    ``my-gpu.yaml``."""
    if name in LEGACY:
        return LEGACY[name]
    base, _, precision = name.rpartition("-")
    if base and precision in ELEMENT_BYTES:
        return base, precision
    return name, None


def calibrated(name: str, precision: str | None = None, **options: object) -> CalibratedCompute:
    """The calibrated model of device ``name`` (see ``parse_device``) in ``precision``
    (default: the name's, else bf16, fp16 on a GPU without bf16)."""
    base, named = parse_device(name)
    gpu = get_gpu(base)
    chosen = precision or named
    if chosen is None:
        chosen = "bf16" if "bf16" in gpu.precisions() else "fp16"
    return CalibratedCompute(gpu, chosen, **options)


def device_compute(name: str, efficiency: float | None = None,
                   backward_ratio: float = 2.0) -> ComputeModel | CalibratedCompute:
    """The calibrated model of device ``name`` (``calibrated``), or with an explicit
    ``efficiency`` the user's ``ComputeModel`` at the precision's peak x ``efficiency``
    (``backward_ratio`` applies to that one only)."""
    model = calibrated(name)
    if efficiency is None:
        return model
    return ComputeModel(model.peak_flops, efficiency, backward_ratio)


@dataclass(frozen=True)
class Roofline:
    """A device roofline: an op takes max(FLOP / ``peak_flops``, bytes moved /
    ``memory_bandwidth``) seconds, both achieved rates. ``Roofline.of(gpu, precision)`` takes
    them from a calibrated preset (GEMM rate, memory rate); the default is the A100 preset in
    bf16."""

    peak_flops: float = field(default_factory=lambda: Roofline.of("a100").peak_flops)
    memory_bandwidth: float = field(
        default_factory=lambda: Roofline.of("a100").memory_bandwidth)

    def __post_init__(self) -> None:
        for name in ("peak_flops", "memory_bandwidth"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"{name}: must be a finite number > 0 (got {value!r})")

    @staticmethod
    def of(gpu: str, precision: str = "bf16") -> Roofline:
        """The achieved GEMM FLOP/s and memory bytes/s of a GPU preset in ``precision``."""
        model = get_gpu(gpu)
        return Roofline(model.kind_rate("gemm", precision), model.memory_rate)

    def op_time(self, flops: float, num_bytes: float) -> float:
        """Seconds of one op of ``flops`` FLOP touching ``num_bytes`` bytes of memory."""
        return max(flops / self.peak_flops, num_bytes / self.memory_bandwidth)
