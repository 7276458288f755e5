"""A collective scenario with its ASTRA-sim inputs applied (``dlsched collective``): the
network (a preset or an ASTRA-sim network file, step latencies scaled), the system file's
chunking, intra-dimension order, algorithms and policy (compared first), the emulation of
ASTRA-sim 2.x, the notes on what ASTRA-sim would do otherwise; and the collective domain's
comparison, ``compare``: each policy's row with its speedup over the baseline (baseline time /
policy time)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dlsched.collectives import CollectiveOp, CollectiveResult, run_collective
from dlsched.collectives.astra_compat import AstraCompat
from dlsched.collectives.scenario import CollectiveScenario
from dlsched.hardware import Topology, load_topology
from dlsched.interop.astra_network import read_astra_network
from dlsched.interop.astra_system import (
    IMPLEMENTATION_KEYS,
    AstraSystem,
    astra_notes,
    read_astra_system,
)
from dlsched.progress import Progress, quiet

BASELINE = "baseline"


@dataclass(frozen=True)
class CollectiveSetup:
    """What a collective scenario runs: on ``topology`` (the system file's algorithms
    applied), with the chunks, concurrency and intra-dimension order it uses (the system
    file's when given), comparing ``policies`` (the system file's first)."""

    scenario: CollectiveScenario
    topology: Topology
    chunks: int
    concurrency: int
    intra: str
    policies: tuple[str, ...]
    compat: AstraCompat | None
    system: AstraSystem | None
    shared_algorithm: str | None
    """A note when the system file gives the operation one algorithm for several dimensions."""

    def run(self, policy: str) -> CollectiveResult:
        """Plan, simulate and score the collective under ``policy``."""
        s = self.scenario
        return run_collective(self.topology, s.op, s.size, self.chunks, policy, self.intra,
                              self.concurrency, self.compat)

    def notes(self) -> list[str]:
        """The system file's unmodelled settings and the ASTRA-sim behaviours that would change
        this run (``--astra-compat`` emulates them)."""
        return astra_notes(self.system, self.topology, (CollectiveOp(self.scenario.op),),
                           self.policies)


def collective_setup(scenario: CollectiveScenario, policies: Sequence[str]) -> CollectiveSetup:
    """The setup of ``scenario`` comparing ``policies``: its ASTRA-sim network and system
    files read (ConfigError naming the file, line and key on bad input)."""
    net = load_topology(scenario.topology) if scenario.astra_network is None else \
        read_astra_network(scenario.astra_network)
    net = net.with_latency_scale(scenario.latency_scale)
    system = None if scenario.astra_system is None else read_astra_system(scenario.astra_system)
    compat = None
    if scenario.astra_compat:
        compat = AstraCompat() if system is None else system.compat()
    if system is None:
        return CollectiveSetup(scenario, net, scenario.chunks, scenario.concurrency,
                               scenario.intra, tuple(policies), compat, None, None)
    op = CollectiveOp(scenario.op)
    return CollectiveSetup(scenario, system.apply(net, op), system.chunks, system.concurrency,
                           system.intra.value,
                           (system.policy, *(n for n in policies if n != system.policy)),
                           compat, system, _shared_algorithm(system, net, op))


def _shared_algorithm(system: AstraSystem, net: Topology, op: CollectiveOp) -> str | None:
    """Say so when the system file gives ``op`` one algorithm for a network of several
    dimensions: it replaces every dimension's own algorithm."""
    algorithms = system.algorithms(op)
    if algorithms is None or len(algorithms) != 1 or len(net.dims) == 1:
        return None
    own = ", ".join(f"{d.kind.value} {d.algorithm.value}" for d in net.dims)
    return (f"{IMPLEMENTATION_KEYS[op]} gives one algorithm ({algorithms[0].value}) for "
            f"{len(net.dims)} dimensions: every dimension runs it, in place of their own ({own})")


@dataclass(frozen=True)
class CollectiveComparison:
    """The ``setup`` compared, the compared policies' ``results`` in its order (the system
    file's policy first) and their ``rows`` (``CollectiveResult.row`` with
    ``speedup_vs_<reference>``)."""

    setup: CollectiveSetup
    results: tuple[CollectiveResult, ...]
    rows: list[dict[str, object]]


def compare(scenario: CollectiveScenario, policies: Sequence[str], reference: str = BASELINE,
            progress: Progress = quiet, setup: CollectiveSetup | None = None
            ) -> CollectiveComparison:
    """The collective of ``scenario`` (its ASTRA-sim files applied) under each of ``policies``
    and ``reference`` (run too when not compared), each row with its speedup over
    ``reference`` (reference time / policy time). ``setup``: ``collective_setup(scenario,
    policies)`` when the caller has built it already (its files read once)."""
    setup = setup or collective_setup(scenario, policies)
    runs = setup.policies if reference in setup.policies else (*setup.policies, reference)
    by_name = {name: setup.run(name) for name in progress(runs, len(runs))}
    reference_s = by_name[reference].time_s
    results = tuple(by_name[name] for name in setup.policies)
    rows = [r.row(setup.chunks, setup.concurrency)
            | {f"speedup_vs_{reference}": reference_s / r.time_s} for r in results]
    return CollectiveComparison(setup, results, rows)
