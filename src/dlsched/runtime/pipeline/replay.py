"""A chain re-timed from a measured run, to replay the run's plan in the simulator.

The profile times each block alone on an idle process; inside a run, ranks share cores, caches
and the Python interpreter's overheads differ, so the stage times differ too. Re-timing the
chain with the run's own median action durations and simulating the same plan separates the
two sources of prediction error: compute-time misprediction (profile vs run) and what the
simulator's schedule and link model misses (replay vs run). Per stage, the blocks' forward FLOP
are scaled so that their sum is the median measured forward (seconds x ``REFERENCE_FLOPS``), the
backward likewise (B, or I + W for split backwards); with split backwards the input-gradient
share becomes the measured sum(I) / sum(I + W) over all stages and, since B then holds the
measured I + W, the split-backward factor 1. Torch-free.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict

import numpy as np

from dlsched.errors import ConfigError
from dlsched.pipeline.chains.chain import REFERENCE_FLOPS, Chain
from dlsched.pipeline.plans.plan import PipelinePlan
from dlsched.pipeline.simulation.sim_result import KIND_NAMES
from dlsched.sim import Timeline

_KIND_OF = {name: kind for kind, name in KIND_NAMES.items()}


def median_action_seconds(timeline: Timeline) -> dict[tuple[int, str], float]:
    """Median duration (s) of each (stage, kind) over a measured timeline's compute spans."""
    durations: dict[tuple[int, str], list[float]] = defaultdict(list)
    for span in timeline.spans:
        if span.kind in _KIND_OF:
            durations[(span.args["stage"], _KIND_OF[span.kind])].append(span.duration)
    return {key: statistics.median(values) for key, values in durations.items()}


def retimed_chain(chain: Chain, plan: PipelinePlan, timeline: Timeline) -> Chain:
    """``chain`` with each stage's blocks scaled to the run's median action times."""
    medians = median_action_seconds(timeline)
    forward, backward = chain.forward_flops.copy(), chain.backward_flops.copy()
    inputs, weights = 0.0, 0.0
    for s, stage in enumerate(plan.stages):
        blocks = slice(stage.first, stage.last)
        if (s, "F") not in medians:
            raise ConfigError(f"timeline: no measured forward of stage {s}")
        split = (s, "I") in medians
        measured_backward = (medians[(s, "I")] + medians[(s, "W")] if split
                             else medians[(s, "B")])
        if split:
            inputs, weights = inputs + medians[(s, "I")], weights + medians[(s, "W")]
        forward[blocks] = _scaled(chain.forward_flops[blocks], medians[(s, "F")])
        backward[blocks] = _scaled(chain.backward_flops[blocks], measured_backward)
    fraction, factor = chain.input_grad_fraction, chain.split_backward_factor
    if inputs + weights > 0:
        fraction, factor = min(max(inputs / (inputs + weights), 0.01), 0.99), 1.0
    return dataclasses.replace(chain, forward_flops=forward, backward_flops=backward,
                               input_grad_fraction=fraction, split_backward_factor=factor)


def _scaled(flops: np.ndarray, seconds: float) -> np.ndarray:
    total = flops.sum()
    target = seconds * REFERENCE_FLOPS
    if total <= 0:
        return np.full(len(flops), target / len(flops))
    return flops * (target / total)
