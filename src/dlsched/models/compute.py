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
``h100`` (default precision: bf16, fp16 on the V100) or ``NAME-PRECISION`` (``h100-tf32``,
``v100-fp16``); a GPU file path works too. An explicit ``efficiency`` gives the
user's ``ComputeModel`` instead.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from dlsched.errors import ConfigError
from dlsched.hardware.gpu import ELEMENT_BYTES, Gpu, GpuSpec, get_gpu
from dlsched.models.layer import Layer, Model
from dlsched.models.ops import Op
from dlsched.models.pricing import op_work
from dlsched.models.timeline import Clock, Work, alone
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


@dataclass(frozen=True)
class StepTime:
    """A training step on the calibrated model: per layer (forward order) the seconds the
    GPU's clock advances in the forward and in the backward, and the GPU's busy and idle
    (waiting for kernel launches) seconds over the step."""

    forward: list[float]
    backward: list[float]
    gpu_busy_s: float
    gpu_idle_s: float

    @property
    def step_s(self) -> float:
        """Forward + backward seconds."""
        return sum(self.forward) + sum(self.backward)

    @property
    def launch_bound(self) -> float:
        """Fraction of the step the GPU waits for the host's kernel launches."""
        return self.gpu_idle_s / self.step_s if self.step_s > 0 else 0.0


@dataclass(frozen=True)
class CalibratedCompute:
    """Kernel-level times on ``gpu`` in ``precision`` (see the module docstring).
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

    def work(self, op: Op, batch_size: float, backward: bool = False) -> Work:
        """GPU seconds and kernel launches of ``op`` on ``batch_size`` samples."""
        return op_work(self, op, batch_size, backward)

    def op_time(self, op: Op, batch_size: float, backward: bool = False) -> float:
        """Seconds of ``op`` on ``batch_size`` samples, forward or ``backward``, run on its own
        (its kernels' launches overlapping its GPU work)."""
        return alone([self.work(op, batch_size, backward)], self._overhead(backward))

    def _overhead(self, backward: bool) -> float:
        """The host's seconds per kernel launched in the forward or the backward."""
        spec = self.gpu.spec
        return spec.backward_overhead if backward else spec.kernel_overhead

    def _works(self, layer: Layer, batch_size: int, backward: bool) -> list[Work]:
        ops = layer.ops
        if not ops and layer.forward_flops:
            ops = (Op("gemm", layer.forward_flops, kernels=0),)
        works = [self.work(op, batch_size, backward) for op in ops]
        return works[::-1] if backward else works

    def forward_time(self, layer: Layer, batch_size: int) -> float:
        """Forward seconds of ``layer`` for ``batch_size`` samples run on its own (profiled
        time if given)."""
        if layer.forward_time is not None:
            return layer.forward_time
        return alone(self._works(layer, batch_size, False), self._overhead(False))

    def backward_time(self, layer: Layer, batch_size: int) -> float:
        """Backward seconds of ``layer`` run on its own (profiled time if given)."""
        if layer.backward_time is not None:
            return layer.backward_time
        return alone(self._works(layer, batch_size, True), self._overhead(True))

    def repeated_time(self, layers: Sequence[Layer], batch_size: int, backward: bool) -> float:
        """Seconds per repetition of ``layers`` (their forward, or their backward) when they
        run back to back many times, as a pipeline stage's blocks do: the host launches ahead
        while the GPU is busy, so the pace is the larger of the GPU's seconds and the host's
        launch seconds (the periodic steady state of ``models.timeline``; a profiled layer
        is GPU time launched by no kernel). Pricing each layer ``alone`` instead would charge
        every layer the wait for its first launches from an idle host, which a stage pays
        only once per action."""
        works = [work for layer in layers
                 for work in (self._profiled(layer, backward)
                              or self._works(layer, batch_size, backward))]
        gpu = sum(work.gpu_s for work in works)
        host = sum(work.launches for work in works) * self._overhead(backward)
        return max(gpu, host)

    def step(self, model: Model, batch_size: int) -> StepTime:
        """One training step of ``model``: forward then backward along one dependency chain,
        the host launching while the GPU runs (``models.timeline``); profiled layer times are
        taken as GPU time of a single launch."""
        clock = Clock()
        forward = [clock.span(self._profiled(layer, False)
                              or self._works(layer, batch_size, False), self._overhead(False))
                   for layer in model.layers]
        backward = [clock.span(self._profiled(layer, True)
                               or self._works(layer, batch_size, True), self._overhead(True))
                    for layer in reversed(model.layers)]
        return StepTime(forward, backward[::-1], clock.busy, clock.idle)

    @staticmethod
    def _profiled(layer: Layer, backward: bool) -> list[Work]:
        seconds = layer.backward_time if backward else layer.forward_time
        return [] if seconds is None else [Work(seconds, 0.0)]

    def layer_times(self, model: Model, batch_size: int) -> tuple[list[float], list[float]]:
        """Forward and backward seconds of every layer, in forward order: what each adds to
        the step (``step``), so they sum to the step time."""
        step = self.step(model, batch_size)
        return step.forward, step.backward

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


def parse_device(name: str) -> tuple[str, str | None]:
    """(GPU preset or file, precision or None) of ``v100``, ``h100-tf32``, ``my-gpu.yaml``."""
    base, _, precision = name.rpartition("-")
    if base and precision in ELEMENT_BYTES:
        return base, precision
    return name, None


def calibrated(name: str | GpuSpec, precision: str | None = None,
               **options: object) -> CalibratedCompute:
    """The calibrated model of device ``name`` (see ``parse_device``; or a validated GPU
    document) in ``precision`` (default: the name's, else bf16, fp16 on a GPU without bf16)."""
    base, named = (name, None) if isinstance(name, GpuSpec) else parse_device(name)
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
