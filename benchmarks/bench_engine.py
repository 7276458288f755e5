"""Event engine and CLI start-up: dlsched's ``sim.Engine`` against SimPy on the same workload,
and the time ``dlsched --version`` / ``--help`` take. Writes the ``engine`` section of
BENCHMARKS.md.

Workload: ``PROCESSES`` independent chains, each scheduling its next event ``STEPS`` times
after a pseudo-random delay (a fixed sequence, the same for every engine), so every engine
pops the same events from a heap of ``PROCESSES`` pending ones. SimPy is run two ways: its
idiomatic generator processes (``yield env.timeout(d)``) and its lightest form, callbacks on
timeout events. SimPy is not a dependency: ``pip install simpy`` to include it.

Run: ``python -m benchmarks.bench_engine`` (quiet machine; best of ``REPEATS`` runs taken in
turn).
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import best_of, host_facts, host_text, write_section
from dlsched.sim.engine import Engine

PROCESSES = 1000
STEPS = 200
REPEATS = 5
DELAYS = [((k * 7919) % 1000 + 1) * 1e-6 for k in range(STEPS)]


def run_dlsched() -> int:
    """The chains on dlsched's Engine; returns the events processed."""
    engine = Engine()

    def step(chain: int, k: int) -> None:
        if k < STEPS:
            engine.after(DELAYS[(k + chain) % STEPS], step, chain, k + 1)

    for chain in range(PROCESSES):
        engine.at(0.0, step, chain, 0)
    engine.run()
    return engine.events_processed


def run_simpy_processes(simpy: Any) -> int:
    """The chains as SimPy generator processes (its usual style)."""
    env = simpy.Environment()
    count = [0]

    def chain_process(chain: int) -> Any:
        for k in range(STEPS):
            count[0] += 1
            yield env.timeout(DELAYS[(k + chain) % STEPS])
        count[0] += 1

    for chain in range(PROCESSES):
        env.process(chain_process(chain))
    env.run()
    return count[0]


def run_simpy_callbacks(simpy: Any) -> int:
    """The chains as callbacks on SimPy timeout events (its lightest form)."""
    env = simpy.Environment()
    count = [0]

    def step(chain: int, k: int) -> None:
        count[0] += 1
        if k < STEPS:
            event = env.timeout(DELAYS[(k + chain) % STEPS])
            event.callbacks.append(lambda _: step(chain, k + 1))

    for chain in range(PROCESSES):
        step(chain, 0)
    env.run()
    return count[0]


def events_per_second(runs: dict[str, Callable[[], int]]) -> dict[str, tuple[int, float]]:
    """Per engine: events of one run and the best rate (events/s) of ``REPEATS`` runs taken
    in turn (engine A, B, C, A, B, C, ...), so a change in the machine's load hits all alike."""
    events = {name: run() for name, run in runs.items()}
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(REPEATS):
        for name, run in runs.items():
            best[name] = min(best[name], best_of(run, 1))
    return {name: (events[name], events[name] / best[name]) for name in runs}


def cli_seconds(*args: str) -> tuple[float, float]:
    """Best wall time and best CPU time (user + system; less sensitive to other processes
    on a busy machine) of ``python -m dlsched ARGS`` over ``REPEATS`` runs, seconds."""
    walls, cpus = [], []
    for _ in range(REPEATS):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dlsched", *args], check=True,
                       capture_output=True)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return min(walls), min(cpus)


def main() -> None:
    runs: dict[str, Callable[[], int]] = {"dlsched sim.Engine (heap of callbacks)": run_dlsched}
    try:
        import simpy
    except ImportError:
        simpy = None
    if simpy is not None:
        runs[f"SimPy {simpy.__version__}, generator processes"] = (
            lambda: run_simpy_processes(simpy))
        runs[f"SimPy {simpy.__version__}, timeout callbacks"] = (
            lambda: run_simpy_callbacks(simpy))
    rows = [(name, *measured) for name, measured in events_per_second(runs).items()]
    ours = rows[0][2]
    table = ["| engine | events per run | events/s | dlsched's rate / this rate |",
             "|---|---|---|---|"]
    table += [f"| {name} | {events:,} | {rate / 1e6:.2f} M | {ours / rate:.2f}x |"
              for name, events, rate in rows]
    (version, version_cpu), (helptext, help_cpu) = cli_seconds("--version"), cli_seconds("--help")
    text = "\n".join([
        f"Machine: {host_text(host_facts())}. Best of {REPEATS} runs taken in turn; "
        f"{PROCESSES} chains of "
        f"{STEPS} events each (`python -m benchmarks.bench_engine`).",
        "",
        *table,
        "" if simpy is not None else "\nSimPy not installed: `pip install simpy` to compare.",
        f"CLI start-up (best of {REPEATS}, wall / CPU): `dlsched --version` {version:.2f} s / "
        f"{version_cpu:.2f} s, `dlsched --help` {helptext:.2f} s / {help_cpu:.2f} s.",
    ])
    write_section("engine", "## Event engine and CLI start-up\n\n" + text + "\n")


if __name__ == "__main__":
    main()
