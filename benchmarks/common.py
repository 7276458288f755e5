"""Shared helpers for the benchmark scripts: machine description and BENCHMARKS.md sections.

Each benchmark script owns one section of BENCHMARKS.md, delimited by HTML comments, and
rewrites only that section, so scripts can be run independently.
"""

from __future__ import annotations

import os
import platform
import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dlsched.runtime.spawn import usable_cores

RESAMPLES = 4000
"""Bootstrap resamples of a ratio of medians."""

BENCHMARKS_FILE = Path(__file__).resolve().parent.parent / "BENCHMARKS.md"
_HEADER = ("# dlsched benchmarks\n\nRegenerate a section with `python -m benchmarks.<script>` "
           "from the repository root.\n")


def cpu_seconds() -> float:
    """CPU seconds (user + system) used so far by this process and by its children that have
    ended (the worker processes of a closed pool)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def processor() -> str:
    """The processor's model as the kernel names it ("AMD EPYC"; Linux /proc/cpuinfo) and its
    architecture, or the architecture alone where there is no such file: two machines with
    the same core count and host name are told apart by it."""
    architecture = platform.machine()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or architecture
    models = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return f"{models[0]}, {architecture}" if models else architecture


def machine_note() -> str:
    """One line naming the machine the numbers were taken on."""
    return (f"{processor()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}")


def steal_seconds() -> float | None:
    """CPU seconds the hypervisor ran something else while this machine's CPUs wanted to run
    (``steal`` in /proc/stat, all CPUs, since boot); None where the kernel does not say."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return None
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else None


def host_facts() -> dict[str, Any]:
    """The machine as measured now: ``cores`` (os.cpu_count), ``usable_cores`` (the ones this
    process may run on, its affinity), ``load`` (1-minute load average), ``torch`` (version,
    None without torch), ``steal_s`` (``steal_seconds``, cumulative)."""
    try:
        import torch

        torch_version: str | None = torch.__version__
    except ImportError:
        torch_version = None
    return {"cores": os.cpu_count(), "usable_cores": usable_cores(),
            "load": os.getloadavg()[0],
            "torch": torch_version, "host": platform.node(),
            "processor": processor(), "steal_s": steal_seconds()}


def host_text(facts: dict[str, Any]) -> str:
    """One line of ``host_facts``."""
    return (f"{facts['usable_cores']} usable of {facts['cores']} cores ({facts['processor']}), "
            f"1-minute load average {facts['load']:.1f}, torch {facts['torch'] or 'absent'}")


def best_of(function: Callable[[], object], repeats: int = 3) -> float:
    """Fastest wall time of ``repeats`` calls, seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def least_of(runs: list[list[list[Any]]], columns: tuple[int, ...]) -> list[list[Any]]:
    """Each row of the first run with, in ``columns``, the least of every run's value there
    (the run least slowed by other work on the machine)."""
    return [[min(row[i] for row in same) if i in columns else value
             for i, value in enumerate(same[0])] for same in zip(*runs, strict=True)]


def in_turn(timed: Callable[[str | None], list[list[Any]]], before: str | None, runs: int,
            columns: tuple[int, ...]) -> tuple[list[list[Any]], list[list[Any]] | None]:
    """``timed`` rows by this checkout (``None``) and, given ``before`` (another checkout's
    ``src`` folder), by that code, ``runs`` times each taken in turn; each checkout's rows with
    the least of its runs in ``columns`` (``least_of``), None for ``before``'s without it."""
    mine: list[list[list[Any]]] = []
    theirs: list[list[list[Any]]] = []
    for _ in range(runs):
        mine.append(timed(None))
        if before:
            theirs.append(timed(before))
    return least_of(mine, columns), (least_of(theirs, columns) if before else None)


def write_section(name: str, markdown: str) -> None:
    """Replace (or append) the section ``name`` of BENCHMARKS.md with ``markdown``."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    text = BENCHMARKS_FILE.read_text() if BENCHMARKS_FILE.exists() else _HEADER
    block = f"{start}\n{markdown.rstrip()}\n\n_Machine: {machine_note()}_\n{end}"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        text = before + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    BENCHMARKS_FILE.write_text(text)
    print(markdown)


def ratio_interval(mine: list[float], other: list[float], confidence: float = 0.95,
                   seed: int = 0) -> tuple[float, float, float]:
    """median(mine) / median(other) - 1, and the bootstrap ``confidence`` interval of it
    (``RESAMPLES`` resamples of each list's iterations with replacement; percentiles)."""
    a, b = np.asarray(mine, dtype=float), np.asarray(other, dtype=float)
    rng = np.random.default_rng(seed)
    ratios = (np.median(rng.choice(a, (RESAMPLES, a.size)), axis=1)
              / np.median(rng.choice(b, (RESAMPLES, b.size)), axis=1) - 1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(np.median(a) / np.median(b) - 1), float(low), float(high)


def interval_text(interval: tuple[float, float, float]) -> str:
    """``+3.4% (95% CI -4.0 to +9.7%)`` from ``ratio_interval``'s result."""
    point, low, high = interval
    return f"{point * 100:+.1f}% (95% CI {low * 100:+.1f} to {high * 100:+.1f}%)"
