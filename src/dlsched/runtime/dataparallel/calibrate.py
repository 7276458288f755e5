"""Calibrate the network between ranks: time all-reduces of a range of sizes and fit them.

Each size is all-reduced ``warmup`` + ``repeats`` times after a barrier, the sizes taken in
turn in every round (so a passing disturbance on a shared machine spoils one repeat of
several sizes rather than every repeat of one size); a sample is the slowest rank's time (the
operation ends when the last rank has its result), the size's value the *mean* of the
repeats: an iteration pays the sum of its messages, whose expectation is the sum of their
means, and the repeats of a small loopback all-reduce can fall in two clusters (on the 2-core
VM 0.3-1 ms and 2-6 ms for every size up to 512 KiB, idle), between which a median jumps
from one measurement to the next. A size whose mean is still uncertain (``standard_error``)
is measured again and its repeats pooled, until every mean holds or the calibration is
refused. With ``load="compute"`` each rank issues the all-reduce
asynchronously and keeps computing (matrix products on its own thread, as backward does)
until it completes, stamped by a watcher thread: the cost under the CPU contention training
overlaps its messages with. On a machine where ranks share cores with compute (a CPU
cluster, or an emulation) a message then waits for the communication threads and the kernel's
network processing to be scheduled, which an idle calibration never sees.

Three fits, all least squares on relative error (each sample weighted by 1/time, so small
messages count as much as large ones):

- alpha-beta: t = alpha + bytes / bandwidth;
- ring: the same line read as 2(N-1) latency + 2(N-1)/N bytes / bandwidth (link bandwidth and
  per-step latency of a ring all-reduce over N ranks);
- piecewise: two alpha-beta segments split at the sample size that fits best, each over at
  least ``MIN_SEGMENT`` (3) samples: a two-sample segment fits its two samples exactly, so it
  always wins and follows their noise (two noisy sizes once gave 4 KiB 1.4 MB/s).

The result is the network file format ``dlsched dataparallel --network FILE`` reads
(``kind: allreduce-cost``; seconds, bytes and bytes/s). With ``load="both"`` the sizes are
timed idle, under load, and queued back to back under load and on idle ranks, in one spawn:
the idle fit is the file's own, the loaded one and its stream its ``under_load`` block, the
idle stream its ``stream``; the simulator charges each message by the curve of what its rank
does meanwhile (``TwoState``).
"""

from __future__ import annotations

import datetime
import platform
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dlsched.errors import ConfigError
from dlsched.report import write_text
from dlsched.runtime.dataparallel.calibration_checks import (
    LOAD_NAMES,
    implausible,
    impossible,
    spread,
    standard_error,
    unsteady,
)

MiB = 2**20
LOADS = ("none", "compute")
CHOICES = (*LOADS, "both")  # what `dlsched calibrate --load` accepts
LOAD_MATRIX = 128  # side of the square matrix products that keep a rank busy (~1 ms each)
STREAM_LENGTH = 8  # all-reduces queued back to back when timing a stream
MIN_SEGMENT = 3  # samples in each piece of the piecewise fit (two are fitted exactly)
ATTEMPTS = 20  # measurements (the later ones of the unsteady sizes only) before a refusal


def time_allreduces(rank: int, world_size: int, sizes: Sequence[int], warmup: int = 2,
                    repeats: int = 5, load: str = "none",
                    compute: list[tuple[int, list[list[float]]]] | None = None
                    ) -> list[tuple[int, list[float]]]:
    """Run on every rank of an initialized group: (bytes, seconds of every repeat) per size,
    each sample the slowest rank's time from issue to completion. With ``load="compute"`` the
    calling thread computes until the all-reduce has completed, and ``compute`` (if given)
    receives per size (bytes, samples): one row per repeat holding every rank's compute
    slowdown beside that all-reduce (``_compute_factor``)."""
    import torch
    import torch.distributed as dist

    if load not in LOADS:
        raise ConfigError(f"load: {load!r}; accepted: {', '.join(LOADS)}")
    matrix = torch.randn(LOAD_MATRIX, LOAD_MATRIX)
    out = torch.empty_like(matrix)
    alone = _cpu_share(matrix, out) if load == "compute" else 1.0
    buffers = size_buffers(sizes)
    times: list[list[float]] = [[] for _ in sizes]
    factors: list[list[list[float]]] = [[] for _ in sizes]
    for repeat in range(warmup + repeats):
        for buffer, size_times, size_factors in zip(buffers, times, factors, strict=True):
            dist.barrier()
            start, cpu_start = time.perf_counter(), time.thread_time()
            work = dist.all_reduce(buffer, async_op=True)
            stamp: list[float] = []
            if load == "compute":
                _compute_until_done([work], stamp, matrix, out)
            share = (time.thread_time() - cpu_start) / (time.perf_counter() - start)
            work.wait()
            elapsed = torch.tensor([(stamp or [time.perf_counter()])[0] - start],
                                   dtype=torch.float64)
            mine = torch.zeros(world_size, dtype=torch.float64)
            mine[rank] = _compute_factor(alone, share)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            dist.all_reduce(mine, op=dist.ReduceOp.SUM)
            if repeat >= warmup:
                size_times.append(float(elapsed[0]))
                size_factors.append([float(f) for f in mine])
    if compute is not None and load == "compute":
        compute.extend((b.numel() * 4, f) for b, f in zip(buffers, factors, strict=True))
    return [(b.numel() * 4, t) for b, t in zip(buffers, times, strict=True)]


def time_streams(rank: int, world_size: int, sizes: Sequence[int], warmup: int = 1,
                 repeats: int = 5, length: int = STREAM_LENGTH, computing: bool = True
                 ) -> list[tuple[int, list[float]]]:
    """Run on every rank of an initialized group: (bytes, seconds per message of every
    repeat) of ``length`` all-reduces of each size issued back to back while the calling
    thread computes (as backward does beside a queue of gradient messages), or with
    ``computing`` False while it only waits (a queue left after backward): the time from
    issuing the first to the last completion over ``length``, the slowest rank's
    (``stream_seconds``)."""
    import torch
    import torch.distributed as dist

    matrix = torch.randn(LOAD_MATRIX, LOAD_MATRIX)
    out = torch.empty_like(matrix)
    times: list[list[float]] = [[] for _ in sizes]
    queues = size_buffers(sizes, length)
    for repeat in range(warmup + repeats):
        for buffers, size_times in zip(queues, times, strict=True):
            dist.barrier()
            issued = time.perf_counter()
            works = [dist.all_reduce(buffer, async_op=True) for buffer in buffers]
            stamps: list[float] = []
            if computing:
                _compute_until_done(works, stamps, matrix, out)
            else:
                _wait_stamping(works, stamps)
            per_message = torch.tensor([stream_seconds(issued, stamps, length)],
                                       dtype=torch.float64)
            dist.all_reduce(per_message, op=dist.ReduceOp.MAX)
            if repeat >= warmup:
                size_times.append(float(per_message[0]))
    return [(max(1, size // 4) * 4, t) for size, t in zip(sizes, times, strict=True)]


def size_buffers(sizes: Sequence[int], copies: int | None = None) -> list[Any]:
    """Zeroed float32 buffers of ``max(1, size // 4)`` elements per size, all views of one
    tensor: without ``copies`` one buffer per size, overlapping (sizes are timed one at a
    time, so a rank holds the largest size's bytes, not the sum of all sizes: 5x less at
    64 points from 4 KiB to 4 GiB); with ``copies`` a list of that many disjoint buffers per
    size (a queue in flight at once; ``copies`` x the largest size in all). All-reducing
    zeros keeps them zero."""
    import torch

    counts = [max(1, size // 4) for size in sizes]
    pool = torch.zeros(max(counts) * (copies or 1), dtype=torch.float32)
    if copies is None:
        return [pool[:n] for n in counts]
    return [[pool[k * n:(k + 1) * n] for k in range(copies)] for n in counts]


def stream_seconds(issued: float, completions: Sequence[float], length: int) -> float:
    """Seconds per message of ``length`` all-reduces issued at ``issued`` (perf-counter
    seconds) and stamped complete at ``completions``: (last completion - issue) / length.
    The time between the first and the last completion is not it: the stamping thread can
    only see a completion when it runs, so when it is late (the compute thread holds the
    core) it sees the first message late and every later one at once (on the 2-core machine
    about 1 us per message against about 370 us for an idle all-reduce)."""
    if len(completions) != length or length < 1:
        raise ConfigError(f"stream: {len(completions)} completions stamped for {length} "
                          "messages")
    return (max(completions) - issued) / length


def _compute_factor(alone: float, beside: float) -> float:
    """How many times slower a rank computes beside an all-reduce: its compute thread's share
    of a core alone (every rank computing, nothing in flight) over its share beside the
    all-reduce (thread CPU seconds / wall seconds of the same window). The thread's CPU time
    is its progress, so this needs no count of whole products (a window of a few products
    is spoilt by the one that overruns it)."""
    return alone / max(beside, 1e-3 * alone)


def _cpu_share(matrix: Any, out: Any, products: int = 200, repeats: int = 3) -> float:
    """The compute thread's share of a core (CPU seconds / wall seconds) with every rank
    computing at once (after a barrier) and no all-reduce in flight: the median of
    ``repeats`` windows of ``products`` matrix products."""
    import torch
    import torch.distributed as dist

    shares = []
    for _ in range(repeats):
        dist.barrier()
        start, cpu_start = time.perf_counter(), time.thread_time()
        for _ in range(products):
            torch.mm(matrix, matrix, out=out)
        shares.append((time.thread_time() - cpu_start) / (time.perf_counter() - start))
    return statistics.median(shares)


def robust_slowdowns(samples: Sequence[tuple[int, Sequence[Sequence[float]]]]
                     ) -> list[tuple[int, float]]:
    """The compute slowdown per size from ``samples`` ((bytes, one row per repeat of every
    rank's factor)): per repeat the median over ranks (one rank starved by the scheduler
    beside one all-reduce is a scheduling accident, whose cost in training, one late rank,
    the slowest-rank profile already carries; the mean of four would let it lift the factor
    of that size several times over), per size the median over repeats, then the
    non-decreasing least-squares fit in size (pool adjacent violators: the communication's
    CPU work per second grows with the message, from waiting on latency to copying and
    reducing at full bandwidth, so a size slowing compute more than a larger one is noise),
    at least 1."""
    ordered = sorted((int(b), statistics.median(statistics.median(r) for r in rows))
                     for b, rows in samples)
    return list(zip((b for b, _ in ordered),
                    (max(1.0, f) for f in monotone_fit([f for _, f in ordered])),
                    strict=True))


def monotone_fit(values: Sequence[float]) -> list[float]:
    """The non-decreasing sequence closest to ``values`` in least squares (isotonic
    regression by pooling adjacent violators: a run that decreases is replaced by its
    mean)."""
    pools: list[tuple[float, int]] = []  # (mean, count)
    for value in values:
        pools.append((float(value), 1))
        while len(pools) > 1 and pools[-2][0] > pools[-1][0]:
            (high, m), (low, n) = pools[-2], pools[-1]
            pools[-2:] = [((high * m + low * n) / (m + n), m + n)]
    return [mean for mean, count in pools for _ in range(count)]


def check_load(load: str) -> None:
    """Refuse a ``--load`` other than ``CHOICES`` (ConfigError naming them)."""
    if load not in CHOICES:
        raise ConfigError(f"load: {load!r}; accepted: {', '.join(CHOICES)}")


def time_loads(rank: int, world_size: int, sizes: Sequence[int], warmup: int, repeats: int,
               load: str, attempts: int = ATTEMPTS) -> dict[str, Any]:
    """``time_allreduces`` under ``load`` (``both``: idle, then under compute load), after a
    warm-up of the process group (``warm_up``): the mean seconds per size per load (keys
    ``none``, ``compute``; samples ``<key>_times``), with compute load the compute slowdowns (key
    ``compute_slowdown``, (bytes, factor) pairs from ``robust_slowdowns``) and the per-rank
    factors (key ``compute_samples``), and with ``both`` the per-message cost of queued
    streams under load and on idle ranks (keys ``stream`` and ``idle_stream``, samples
    ``<key>_times``: ``time_streams``, as many ``repeats``).
    A calibration that is ``implausible`` is measured again, up to ``attempts`` times in all:
    the sizes whose mean is uncertain (``unsteady``; every size if none is) get ``repeats``
    more repeats under every load, pooled with the earlier ones (``pooled``), so a mean known
    within 28% on 15 repeats is judged again on 30, 45, ... The reasons are listed under
    ``rejected``, and after the last attempt under ``refused`` too (``loads_document`` then
    refuses it). A measurement with an ``impossible`` value is discarded. Every rank decides
    alike: each sample is the same reduced value on every rank."""
    check_load(load)
    if not 1 <= attempts <= 20:
        raise ConfigError(f"attempts: {attempts} must be in 1..20")
    warm_up(sizes)
    rejected: list[str] = []
    kept: dict[str, Any] | None = None
    todo = list(sizes)
    for _ in range(attempts):
        timed = _measure_loads(rank, world_size, todo, warmup, repeats, load)
        reason = impossible(timed)
        if reason is None:
            kept = timed if kept is None else pooled(kept, timed)
            reason = implausible(kept)
            if reason is None:
                return kept | {"rejected": rejected}
            todo = sorted({size for _, size, _, _ in unsteady(kept)}) or list(sizes)
        rejected.append(reason)
    return (kept or timed) | {"rejected": rejected, "refused": rejected[-1]}


def pooled(earlier: dict[str, Any], later: dict[str, Any]) -> dict[str, Any]:
    """Two measurements as one: the repeats of the sizes ``later`` measured (all of
    ``earlier``'s or some) added to ``earlier``'s (``<load>_times``, ``compute_samples``),
    means and compute slowdowns recomputed."""
    timed = dict(earlier)
    for key in [k for k in earlier if k.endswith("_times") or k == "compute_samples"]:
        more = dict(later[key])
        timed[key] = [(b, [*first, *more.get(b, ())]) for b, first in earlier[key]]
        if key.endswith("_times"):
            timed[key.removesuffix("_times")] = [(b, statistics.mean(t)) for b, t in timed[key]]
    if "compute_samples" in earlier:
        timed["compute_slowdown"] = robust_slowdowns(timed["compute_samples"])
    return timed


def _measure_loads(rank: int, world_size: int, sizes: Sequence[int], warmup: int,
                   repeats: int, load: str) -> dict[str, Any]:
    compute: list[tuple[int, list[list[float]]]] = []
    samples = {one: time_allreduces(rank, world_size, sizes, warmup, repeats, one, compute)
               for one in (LOADS if load == "both" else (load,))}
    if load == "both":
        samples["stream"] = time_streams(rank, world_size, sizes, 1, repeats)
        samples["idle_stream"] = time_streams(rank, world_size, sizes, 1, repeats,
                                              computing=False)
    timed: dict[str, Any] = {}
    for key, per_size in samples.items():
        timed[key] = [(b, statistics.mean(t)) for b, t in per_size]
        timed[f"{key}_times"] = per_size
    return timed | ({"compute_slowdown": robust_slowdowns(compute),
                     "compute_samples": compute} if compute else {})


def warm_up(sizes: Sequence[int], rounds: int = 3, products: int = 50) -> None:
    """Before anything is timed, on every rank: ``rounds`` all-reduces of every size (the
    process group's first messages open its connections and grow its buffers) and
    ``products`` matrix products (the first ones allocate and load the kernels)."""
    import torch
    import torch.distributed as dist

    matrix = torch.randn(LOAD_MATRIX, LOAD_MATRIX)
    out = torch.empty_like(matrix)
    buffers = size_buffers(sizes)
    for _ in range(rounds):
        for buffer in buffers:
            dist.all_reduce(buffer)
    for _ in range(products):
        torch.mm(matrix, matrix, out=out)
    dist.barrier()


def _compute_until_done(works: Sequence[Any], stamp: list[float], matrix: Any,
                        out: Any) -> None:
    """Keep the calling thread busy with matrix products (as backward) until every one of
    ``works`` has completed, stamped into ``stamp`` by a watcher thread (``_wait_stamping``)."""
    import torch

    watcher = threading.Thread(target=_wait_stamping, args=(works, stamp),
                               name="dlsched-stamp", daemon=True)
    watcher.start()
    while watcher.is_alive():
        torch.mm(matrix, matrix, out=out)


def _wait_stamping(works: Sequence[Any], stamp: list[float]) -> None:
    """Wait for each of ``works`` in turn; append the perf-counter time it completed."""
    for work in works:
        work.wait()
        stamp.append(time.perf_counter())


def _line(sizes: np.ndarray, seconds: np.ndarray) -> tuple[float, float]:
    """Weighted least squares t = alpha + beta x on relative error; alpha, beta >= 0."""
    weights = 1.0 / seconds
    design = np.stack([np.ones_like(sizes), sizes], axis=1) * weights[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, seconds * weights, rcond=None)
    if beta <= 0:
        return float(np.median(seconds)), 1e-15
    if alpha < 0:
        beta = float(np.sum(seconds * sizes * weights**2) / np.sum((sizes * weights) ** 2))
        alpha = 0.0
    return float(alpha), float(beta)


def _relative_error(sizes: np.ndarray, seconds: np.ndarray, alpha: float, beta: float) -> float:
    return float(np.sum(((alpha + beta * sizes) / seconds - 1.0) ** 2))


def fit(samples: Sequence[tuple[int, float]], workers: int) -> dict[str, Any]:
    """The three fits of (bytes, seconds) samples as network-file blocks (SI units)."""
    if len(samples) < 2 or any(not s > 0 or not b > 0 for b, s in samples):
        raise ConfigError(f"samples: need >= 2 positive (bytes, seconds) pairs (got {samples})")
    ordered = sorted(samples)
    sizes = np.array([b for b, _ in ordered], dtype=float)
    seconds = np.array([s for _, s in ordered], dtype=float)
    alpha, beta = _line(sizes, seconds)
    steps = 2 * (workers - 1) if workers > 1 else 1
    result: dict[str, Any] = {
        "alpha_beta": {"alpha": alpha, "bandwidth": 1.0 / beta},
        "ring": {"latency": alpha / steps,
                 "bandwidth": (steps / workers if workers > 1 else 1.0) / beta},
    }
    best: tuple[float, list[dict[str, Any]]] = (
        _relative_error(sizes, seconds, alpha, beta),
        [{"alpha": alpha, "bandwidth": 1.0 / beta}])
    for split in range(MIN_SEGMENT, len(sizes) - MIN_SEGMENT + 1):
        low = _line(sizes[:split], seconds[:split])
        high = _line(sizes[split:], seconds[split:])
        error = (_relative_error(sizes[:split], seconds[:split], *low)
                 + _relative_error(sizes[split:], seconds[split:], *high))
        if error < best[0]:
            best = (error, [{"up_to": int(sizes[split - 1]), "alpha": low[0],
                             "bandwidth": 1.0 / low[1]},
                            {"alpha": high[0], "bandwidth": 1.0 / high[1]}])
    result["piecewise"] = best[1]
    return result


def _fits(samples: Sequence[tuple[int, float]], workers: int, model: str) -> dict[str, Any]:
    return {"model": model, **fit(samples, workers),
            "samples": [{"bytes": int(b), "seconds": float(s)} for b, s in samples]}


def network_document(samples: Sequence[tuple[int, float]], workers: int, name: str,
                     backend: str, model: str = "piecewise", load: str = "none",
                     comm_nice: int | None = None,
                     loaded: Sequence[tuple[int, float]] | None = None,
                     compute: Sequence[tuple[int, float]] | None = None,
                     stream: Sequence[tuple[int, float]] | None = None,
                     quality: dict[str, Any] | None = None,
                     idle_stream: Sequence[tuple[int, float]] | None = None) -> dict[str, Any]:
    """The ``kind: allreduce-cost`` document of these samples, using fit ``model``; with
    ``loaded`` (samples timed under compute load) its ``under_load`` block too, with the
    ``compute`` slowdowns ((bytes, factor) pairs) measured beside them and the fit of the
    queued ``stream`` samples (seconds per message), and the fit of the ``idle_stream``
    samples (queued on idle ranks) as the top-level ``stream``; ``quality`` (rejected
    measurements, largest spreads) is recorded under ``measured_with``."""
    if model not in ("alpha-beta", "ring", "piecewise"):
        raise ConfigError(f"model: {model!r} is not a fit; accepted: alpha-beta, ring, "
                          "piecewise")
    document = {"kind": "allreduce-cost", "name": name, "workers": workers,
                **_fits(samples, workers, model)}
    if loaded is not None:
        document["under_load"] = _fits(loaded, workers, model) | {"compute_slowdown": [
            {"bytes": int(b), "factor": float(f)} for b, f in compute or ()]} | (
            {"stream": _fits(stream, workers, model)} if stream else {})
        if idle_stream:
            document["stream"] = _fits(idle_stream, workers, model)
    return document | {"measured_with": {
        "backend": backend, "host": platform.node(), "date": datetime.date.today().isoformat(),
        "load": "both" if loaded is not None else load, "comm_nice": comm_nice}
        | (quality or {})}


def loads_document(timed: dict[str, Any], workers: int, name: str, backend: str,
                   model: str = "piecewise", comm_nice: int | None = None) -> dict[str, Any]:
    """The document of ``time_loads``' result: one load's fit, or with both the idle fit
    and the loaded one as ``under_load``. A calibration ``time_loads`` refused raises
    ConfigError with its reason."""
    if timed.get("refused"):
        raise ConfigError(f"calibration: refused after {len(timed['rejected'])} "
                          f"measurements: {timed['refused']}")
    quality = {"rejected": list(timed.get("rejected", ())), **{
        name: {LOAD_NAMES[load]: max(measure(t) for _, t in timed[f"{load}_times"])
               for load in LOAD_NAMES if f"{load}_times" in timed}
        for name, measure in (("largest_spread", spread),
                              ("largest_standard_error", standard_error))}}
    if set(LOADS) <= set(timed):
        return network_document(timed["none"], workers, name, backend, model, "none",
                                comm_nice, timed["compute"], timed.get("compute_slowdown"),
                                timed.get("stream"), quality, timed.get("idle_stream"))
    (load, samples), = ((k, v) for k, v in timed.items() if k in LOADS)
    return network_document(samples, workers, name, backend, model, load, comm_nice,
                            quality=quality)


def write_network(document: dict[str, Any], path: str | Path) -> None:
    """Write the document as YAML (``.yaml``/``.yml``) or JSON."""
    import json

    import yaml

    path = Path(path)
    text = (yaml.safe_dump(document, sort_keys=False)
            if path.suffix.lower() in (".yaml", ".yml") else json.dumps(document, indent=1))
    write_text(path, text)
