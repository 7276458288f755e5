"""The host time a CPU pipeline rank spends per activation or gradient it sends or receives.

On CPU, torch.distributed.pipelining's sends and receives cost the ranks' own cores: posting
each operation, gloo's transport copying the tensor, waiting for its completion. None of it is
inside a stamped compute action, and the one-stage calibration (``calibrate``) has no
transfers, so its overhead per action leaves it out. Measured on the 2-core VM (2026-11-25),
interleaved 1F1B on 2 ranks (3 stage boundaries, 48 transfers per rank and iteration) idled 21%
against 9% predicted and 1F1B (16 transfers) 17% against 13%: about 0.6 ms per transfer in
both.

A two-rank run whose every compute action is stamped on one clock measures it: between two
consecutive actions of one rank, the gap is the runtime's overhead, the transfers around it
(the first action's sends, the second's receives: ``gap_transfers``) and any wait for the
second action's input. A gap is *wait-free* when that input's producing action on the other
rank ended, plus the link time, before the first action ended: then ``gap = overhead + cost x
transfers``, so with the overhead from the one-stage calibration each such gap with transfers
gives one sample of the cost per transfer; the median over samples is the estimate, and three
interleaved parts of the iterations (iterations i, i + 3, ...) must agree like the other
calibrations' parts. Sends and receives are charged alike (the simulator's
``Device.transfer_overhead``). Torch-free.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from itertools import pairwise

from dlsched.errors import ConfigError
from dlsched.pipeline.plans.actions import Action
from dlsched.pipeline.plans.plan import Stage, host_transfers
from dlsched.pipeline.simulation.sim_result import KIND_NAMES
from dlsched.sim import Span, Timeline

_KIND_OF = {name: kind for kind, name in KIND_NAMES.items()}
PARTS = 3
"""Interleaved parts of the iterations whose estimates must agree."""
MIN_SAMPLES = 5
"""Fewest wait-free gaps with transfers a part needs."""


def _receives(stages: tuple[Stage, ...], action: Action) -> Action | None:
    """The action on another GPU whose output ``action`` receives, or None."""
    s, j = action.stage, action.microbatch
    source = s - 1 if action.kind == "F" else s + 1
    if action.kind == "W" or not 0 <= source < len(stages):
        return None
    if stages[source].devices == stages[s].devices:
        return None
    return Action(source, "F" if action.kind == "F" else action.kind, j)


def _action(span: Span) -> Action:
    return Action(span.args["stage"], _KIND_OF[span.kind], span.args["microbatch"])


def gap_transfers(stages: tuple[Stage, ...], before: Action, after: Action,
                  device: int) -> int:
    """Transfers in the gap between ``before`` and ``after`` on ``device``: the sends of
    ``before`` and the receive of ``after``."""
    own = _receives(stages, before) is not None
    return (host_transfers(stages, before, device) - own
            + (_receives(stages, after) is not None))


def wait_free_gaps(timeline: Timeline, stages: tuple[Stage, ...], names: tuple[str, ...],
                   link_s: float) -> list[tuple[int, float, int]]:
    """(iteration, gap seconds, transfers in it) of every wait-free gap of a measured
    ``timeline`` of a plan with one GPU per stage named ``names[device]``; ``link_s``
    (seconds) is the longest a transfer takes on the link."""
    spans: dict[int, dict[Action, Span]] = defaultdict(dict)
    ranks: dict[tuple[int, str], list[Span]] = defaultdict(list)
    for span in timeline.spans:
        if span.kind in _KIND_OF:
            spans[span.args["iteration"]][_action(span)] = span
            ranks[(span.args["iteration"], span.resource)].append(span)
    devices = {name: k for k, name in enumerate(names)}
    gaps = []
    for (iteration, resource), row in ranks.items():
        row.sort(key=lambda span: span.start)
        for first, second in pairwise(row):
            after = _action(second)
            producer = _receives(stages, after)
            if producer is not None and (
                    producer not in spans[iteration]
                    or spans[iteration][producer].end + link_s > first.end):
                continue
            count = gap_transfers(stages, _action(first), after, devices[resource])
            gaps.append((iteration, second.start - first.end, count))
    return gaps


def transfer_cost(gaps: list[tuple[int, float, int]], overhead_s: float
                  ) -> tuple[float, tuple[float, ...], int]:
    """(seconds per transfer, the estimate of each of the ``PARTS`` interleaved parts of the
    iterations, samples) from ``wait_free_gaps`` and the runtime's ``overhead_s`` per
    action: the median of (gap - overhead) / transfers over gaps with transfers."""
    samples: dict[int, list[float]] = defaultdict(list)
    for iteration, gap, count in gaps:
        if count:
            samples[iteration % PARTS].append((gap - overhead_s) / count)
    every = [value for part in samples.values() for value in part]
    if len(samples) < PARTS or min(map(len, samples.values())) < MIN_SAMPLES:
        raise ConfigError(
            f"transfer calibration: {len(every)} gaps with transfers where no action waited "
            f"for its input, need {MIN_SAMPLES} in each of {PARTS} parts of the iterations "
            "(the ranks waited on each other; measure on an idle machine)")
    return (statistics.median(every),
            tuple(statistics.median(samples[part]) for part in range(PARTS)), len(every))
