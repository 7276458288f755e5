"""Where a data-parallel iteration's layer times come from: the calibrated GPU model of
``--device`` (or ``--efficiency`` x its peak), or the US-Byte authors' forward times
(``params-proportional``); and the model trained: a zoo model or a per-layer profile file.
``dlsched dataparallel`` and the sweep's dataparallel domain both build their inputs here."""

from __future__ import annotations

from pathlib import Path

from dlsched.dataparallel.authors_times import ParamsProportional, authors_forward
from dlsched.dataparallel.problem import LayerTimes
from dlsched.errors import ConfigError
from dlsched.models import Model, device_compute, get_model, load_profile

COMPUTES = ("device", "params-proportional")
"""Accepted ``--compute`` sources."""


def load_trained(model: str, profile: str | Path | None) -> Model:
    """The per-layer profile file ``profile`` when given, else the zoo model ``model``."""
    return load_profile(profile) if profile is not None else get_model(model)


def layer_times(compute: str, device: str, efficiency: float | None, backward_ratio: float,
                model: str, profile: str | Path | None,
                batch_size: int | None) -> tuple[LayerTimes, int, str]:
    """The compute model, the batch size (samples per worker: default 32, or the authors'
    with their times) and its label for titles; ``backward_ratio``: backward s / forward s."""
    if compute not in COMPUTES:
        raise ConfigError(f"--compute: {compute!r} is not a compute model; accepted: "
                          + ", ".join(COMPUTES))
    if compute == "device":
        return (device_compute(device, efficiency, backward_ratio),
                32 if batch_size is None else batch_size, device)
    if profile is not None or efficiency is not None:
        raise ConfigError("--compute: params-proportional takes the US-Byte authors' forward "
                          "times, not --profile or --efficiency; accepted: drop those, or "
                          "--compute device")
    source = authors_forward(model)
    batch = source.batch_size if batch_size is None else batch_size
    return (ParamsProportional(backward_ratio), batch,
            f"US-Byte authors' forward times (proportional to parameters, "
            f"{source.forward_s * 1e3:g} ms at batch {source.batch_size}), backward "
            f"{backward_ratio:g}x forward")
