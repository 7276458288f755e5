"""The ``--network`` text of the data-parallel commands -> an all-reduce cost model.

Accepted forms: a preset, ``ALPHA,BETA``, a per-step-latency formula
(``ring|ring-startup|tree|nccl:BANDWIDTH,LATENCY``), ``topology:PRESET`` or a fitted network file
(``dataparallel.netfile``). Sits above ``comm`` (the cost models) and ``netfile`` (the file
schema) so neither imports the other's parser.
"""

from __future__ import annotations

from dataclasses import replace

from dlsched.dataparallel.comm import (
    PRESETS,
    AlphaBeta,
    CommModel,
    TopologyPriced,
    nccl_allreduce,
    ring_allreduce,
    tree_allreduce,
)
from dlsched.dataparallel.netfile import load_network_file, read_network_file
from dlsched.errors import ConfigError
from dlsched.hardware import load_topology
from dlsched.validation import BANDWIDTH, LATENCY, SECONDS_PER_BYTE

# ``ring-startup`` names the ring formula as the US-Byte 128-GPU case uses it: a startup that
# grows with the ring, 2(N-1) x the per-step latency (10 GbE, 37 us: 9.4 ms at N = 128).
FORMULAS = {"ring": ring_allreduce, "ring-startup": ring_allreduce, "tree": tree_allreduce,
            "nccl": nccl_allreduce}
ACCEPTED = (", ".join(PRESETS) + ", 'ALPHA,BETA' (e.g. '1.3ms,6e-11'), 'ring|ring-startup|"
            "tree|nccl:BANDWIDTH,LATENCY' (e.g. 'nccl:100Gb/s,5us', "
            "'ring-startup:10Gb/s,37us'; per-step latency), "
            "'topology:PRESET', or a fitted network file (.yaml/.json, kind: allreduce-cost)")


def parse_network(text: str, workers: int) -> CommModel:
    """``--network``: a preset (usbyte-2/4/8, 10gbe-8), ``ALPHA,BETA`` (startup and seconds per
    byte), ``ring:``/``tree:``/``nccl:BANDWIDTH,LATENCY`` (link bandwidth, per-step latency, over
    ``workers``; nccl = the faster of tree and ring per size; ``ring-startup:`` is ``ring:``
    under the name of the US-Byte 128-GPU case: startup 2(N-1) x the per-step latency),
    ``topology:PRESET`` (a collective topology preset or file), or a fitted network file
    (``dlsched calibrate``'s output)."""
    if text in PRESETS:
        return PRESETS[text]
    formula, colon, rest = text.partition(":")
    if colon and formula in FORMULAS:
        bandwidth, _, latency = rest.partition(",")
        comm = FORMULAS[formula](workers, BANDWIDTH.parse(bandwidth, "network: link bandwidth"),
                                 LATENCY.parse(latency or 0.0, "network: step latency"))
        return replace(comm, name=f"{formula}-{workers}")
    if colon and formula == "topology":
        return TopologyPriced(load_topology(rest), name=text)
    if text.lower().endswith((".yaml", ".yml", ".json")):
        return load_network_file(text, workers)
    alpha, comma, beta = text.partition(",")
    if comma:
        return AlphaBeta(LATENCY.parse(alpha.strip(), "network: alpha (startup)"),
                         SECONDS_PER_BYTE.parse(beta.strip(), "network: beta (s/B)"), text)
    raise ConfigError(f"network: {text!r} is not understood; accepted: {ACCEPTED}")


def assumed_latency_note(text: str) -> str | None:
    """The note a formula network without a latency (``ring:10Gb/s``) deserves: its per-step
    latency is taken as 0 s, which makes small all-reduces free of start-up cost."""
    formula, colon, rest = text.partition(":")
    if not colon or formula not in FORMULAS or "," in rest:
        return None
    return (f"--network {text!r} gives no per-step latency: 0 s is assumed (give one, e.g. "
            f"'{text},5us')")


DEFAULT_WORKERS = 8
"""Data-parallel ranks of a formula network (``ring:...``) when no count is given."""


def network_for_workers(text: str, workers: int | None,
                        default: int = DEFAULT_WORKERS) -> tuple[CommModel, int | None]:
    """The cost model of ``--network`` and the data-parallel rank count it describes, checked
    against ``workers`` (None: not given), so a result is never labelled with a rank count it
    was not priced for.

    A fitted file supplies its own count by default; its ring fit is re-evaluated for any
    count, its other fits hold only at the count they were measured on (ConfigError
    otherwise). A preset measured at N workers (``usbyte-8``) and a topology of N NPUs fix N:
    ``workers`` must be N or None. ``ALPHA,BETA`` already prices one all-reduce across every
    worker, so ``workers`` is refused there (the count is None). Formulas (``ring:...``) use
    ``workers`` (or ``default``).
    """
    if text.lower().endswith((".yaml", ".yml", ".json")):
        fitted = read_network_file(text)
        ranks = fitted.workers if workers is None else workers
        return fitted.build(ranks), ranks
    comm = parse_network(text, default if workers is None else workers)
    fixed: int | None = None
    if isinstance(comm, TopologyPriced):
        fixed, what = comm.topology.num_npus, f"topology {comm.topology.name!r} has"
    elif text in PRESETS:
        fixed, what = int(text.rsplit("-", 1)[1]), f"preset {text!r} was measured with"
    elif isinstance(comm, AlphaBeta) and comm.name == text:
        if workers is not None:
            raise ConfigError(f"workers: {workers} is not used by network {text!r} (its "
                              "ALPHA,BETA already price one all-reduce across all workers); "
                              "accepted: omit workers, or a network that depends on it: "
                              "ring|tree|nccl:BANDWIDTH,LATENCY, a preset or topology:PRESET")
        return comm, None
    if fixed is None:
        return comm, default if workers is None else workers
    if workers is not None and workers != fixed:
        raise ConfigError(f"workers: {workers} does not match network {text!r} ({what} "
                          f"{fixed} workers); accepted: {fixed} or omit workers, or "
                          "ring|tree|nccl:BANDWIDTH,LATENCY for any worker count")
    return comm, fixed
