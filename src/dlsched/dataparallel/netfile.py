"""Fitted all-reduce cost files (``kind: allreduce-cost``): schema and loader.

The format, agreed with the torch runtime's ``dlsched calibrate`` which writes it, is described
in docs/dataparallel.md. Plain numbers are seconds, bytes and bytes/s; strings with units
("120 us", "1.1 GB/s", "64 KiB") are accepted. ``model`` names which fit ``--network`` uses:

* ``alpha-beta``: ``{alpha, bandwidth}``, t = alpha + bytes / bandwidth;
* ``ring``: ``{latency, bandwidth}``, t = 2(N-1) latency + 2(N-1)/N bytes / bandwidth;
* ``piecewise``: segments ``{up_to, alpha, bandwidth}`` ascending, the last without ``up_to``.

Only the block named by ``model`` is required. ``samples`` (the timed all-reduces) and
``measured_with`` (provenance) are optional and not used for planning.

An optional ``under_load`` block (its own ``model``, fit blocks and ``samples``) is the cost
of the same all-reduces while the ranks compute (``dlsched calibrate --load both``); the
top-level fit is then the idle cost, and the simulator charges each message by the loaded
curve for the part of it that overlaps compute (``TwoState``). Its optional
``compute_slowdown`` (``{bytes, factor}`` ascending) says how many times slower the ranks
compute beside an all-reduce of that size; its optional ``stream`` block (``model``, fits,
``samples``) is the loaded cost per message of all-reduces queued back to back, charged to
messages that waited behind another (``TwoState.queued_slowdown``). With ``under_load``, an
optional top-level ``stream`` block is the same queue's cost per message while no rank
computes (``TwoState.idle_queued_slowdown``).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dlsched.config import validate
from dlsched.dataparallel.comm import (
    AlphaBeta,
    CommModel,
    Piecewise,
    Segment,
    TwoState,
    ring_allreduce,
)
from dlsched.errors import ConfigError
from dlsched.validation import (
    MAX_WORKERS,
    Bandwidth,
    ByteSize,
    Duration,
    PositiveFinite,
    Seconds,
    load_document_safely,
)

FIT_MODELS = ("alpha-beta", "ring", "piecewise")
"""The fits a network file's ``model`` may name."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AlphaBetaFit(_Strict):
    """t = alpha + bytes / bandwidth."""

    alpha: Seconds
    bandwidth: Bandwidth


class RingFit(_Strict):
    """t = 2(N-1) latency + 2(N-1)/N bytes / bandwidth."""

    latency: Seconds
    bandwidth: Bandwidth


class SegmentFit(AlphaBetaFit):
    """One size range of a piecewise fit: messages of at most ``up_to`` bytes (> 0)."""

    up_to: ByteSize | None = Field(None, gt=0)


class Sample(_Strict):
    """One timed all-reduce."""

    bytes: ByteSize
    seconds: Duration


class Fits(_Strict):
    """The fitted cost curves of one set of timed all-reduces; ``model`` names the one used."""

    model: Literal["alpha-beta", "ring", "piecewise"]
    alpha_beta: AlphaBetaFit | None = None
    ring: RingFit | None = None
    piecewise: list[SegmentFit] | None = Field(None, min_length=1)
    samples: list[Sample] = []

    @field_validator("piecewise")
    @classmethod
    def _ascending(cls, segments: list[SegmentFit] | None) -> list[SegmentFit] | None:
        if segments is None:
            return None
        limits = [s.up_to for s in segments]
        if limits[-1] is not None or None in limits[:-1]:
            raise ValueError("every segment but the last needs up_to (bytes); the last has none")
        if any(a >= b for a, b in itertools.pairwise(limits[:-1])):
            raise ValueError(f"up_to must be strictly ascending (got {limits[:-1]})")
        return segments

    @model_validator(mode="after")
    def _named_block(self) -> Fits:
        if getattr(self, self.model.replace("-", "_")) is None:
            raise ValueError(f"model is {self.model!r} but the file has no "
                             f"{self.model.replace('-', '_')!r} block")
        return self

    def curve(self, ranks: int, name: str) -> AlphaBeta | Piecewise:
        """The fit ``model`` names, for ``ranks`` ranks (a ring fit is re-evaluated)."""
        if self.model == "alpha-beta" and self.alpha_beta is not None:
            return AlphaBeta(self.alpha_beta.alpha, 1 / self.alpha_beta.bandwidth, name)
        if self.model == "ring" and self.ring is not None:
            ring = ring_allreduce(ranks, self.ring.bandwidth, self.ring.latency)
            return AlphaBeta(ring.alpha, ring.beta, name)
        assert self.piecewise is not None
        return Piecewise(tuple(Segment(math.inf if s.up_to is None else float(s.up_to),
                                       s.alpha, 1 / s.bandwidth) for s in self.piecewise), name)


class ComputeSample(_Strict):
    """Compute beside an all-reduce of ``bytes``: ``factor`` = its time / its time alone."""

    bytes: ByteSize
    factor: PositiveFinite


class LoadedFits(Fits):
    """The fits under compute load, and optionally how much the all-reduces slow the compute
    (``compute_slowdown``, ascending sizes)."""

    compute_slowdown: list[ComputeSample] = []
    stream: Fits | None = None

    @field_validator("compute_slowdown")
    @classmethod
    def _ascending_sizes(cls, samples: list[ComputeSample]) -> list[ComputeSample]:
        sizes = [s.bytes for s in samples]
        if any(a >= b for a, b in itertools.pairwise(sizes)):
            raise ValueError(f"bytes must be strictly ascending (got {sizes})")
        return samples


class NetworkFile(Fits):
    """A fitted all-reduce cost file: the top-level fit (idle when ``under_load`` is given)
    and optionally the fit of the same all-reduces timed while the ranks compute."""

    kind: Literal["allreduce-cost"]
    name: str = Field("fitted", min_length=1)
    workers: int = Field(ge=2, le=MAX_WORKERS)
    under_load: LoadedFits | None = None
    stream: Fits | None = None
    measured_with: dict[str, Any] = {}

    @model_validator(mode="after")
    def _stream_needs_loads(self) -> NetworkFile:
        if self.stream is not None and self.under_load is None:
            raise ValueError("stream (queued all-reduces on idle ranks) is part of a two-state "
                             "file: give under_load too (dlsched calibrate --load both)")
        return self

    def build(self, workers: int | None = None) -> CommModel:
        """The cost model ``model`` names (with ``under_load``: idle and loaded curves).
        ``workers``: the job's ranks; a ring fit is re-evaluated for them, the other fits are
        valid only for the file's ``workers``."""
        ranks = self.workers if workers is None else workers
        loaded_fits = ([self.under_load, self.under_load.stream, self.stream]
                       if self.under_load else [])
        models = {self.model} | {fits.model for fits in loaded_fits if fits is not None}
        if ranks != self.workers and models != {"ring"}:
            raise ConfigError(f"workers: the network file {self.name!r} was fitted on "
                              f"{self.workers} ranks and its {'/'.join(sorted(models))} model "
                              f"holds only for them (got --workers {ranks}); accepted: "
                              f"{self.workers} (or omit --workers), a ring fit (calibrate "
                              f"--model ring), or a file calibrated on {ranks} ranks "
                              f"(dlsched calibrate --workers {ranks})")
        name = f"{self.name} ({self.model})"
        idle = self.curve(ranks, name)
        if self.under_load is None:
            return idle
        loaded = self.under_load.curve(ranks, f"{self.name} under load "
                                              f"({self.under_load.model})")
        stream = self.under_load.stream
        return TwoState(idle, loaded, f"{self.name} ({self.model}, idle / under load)",
                        tuple((float(s.bytes), s.factor)
                              for s in self.under_load.compute_slowdown),
                        None if stream is None else stream.curve(
                            ranks, f"{self.name} queued under load ({stream.model})"),
                        None if self.stream is None else self.stream.curve(
                            ranks, f"{self.name} queued, idle ({self.stream.model})"))


def read_network_file(path: str | Path) -> NetworkFile:
    """Read and validate a fitted network file; ConfigError names the bad field."""
    return validate(NetworkFile, load_document_safely(path, "network file"),
                    f"network file {path}")


def load_network_file(path: str | Path, workers: int | None = None) -> CommModel:
    """The cost model of a fitted network file, for ``workers`` ranks (default: the file's)."""
    return read_network_file(path).build(workers)
