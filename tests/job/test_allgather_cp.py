"""PyTorch's all-gather context parallelism (``job.allgather_cp``): the exposed seconds at the
bounds of the overlap, checked by hand, and the algorithm priced when given, never searched."""

from __future__ import annotations

import pytest

from dlsched.job.cluster import load_cluster
from dlsched.job.communication.allgather_cp import (
    allgather_buffer,
    allgather_bytes,
    allgather_exposed,
)
from dlsched.job.communication.collective_costs import curve

GROUP = load_cluster("dgx-h100", 8, None).group_topology(1, 4)
BLOCK = 64e6  # bytes of one GPU's K and V block


def test_nothing_to_hide_behind_exposes_everything() -> None:
    """No attention to overlap: the forward is the all-gather of the 4 blocks, the backward
    the all-gather again and the 4 dK/dV transfers."""
    gather = curve(GROUP, "all-gather", "baseline").seconds(4 * BLOCK)
    forward, backward = allgather_exposed(BLOCK, 4, GROUP, "baseline", 0.01, 0.0, 0.0)
    assert forward == pytest.approx(gather)
    assert backward == pytest.approx(gather + 4 * 0.01)


def test_a_long_attention_hides_all_but_the_last_dkv_send() -> None:
    forward, backward = allgather_exposed(BLOCK, 4, GROUP, "baseline", 0.01, 100.0, 100.0)
    assert forward == 0.0
    assert backward == pytest.approx(0.01)


def test_bytes_and_buffer_by_hand() -> None:
    assert allgather_bytes(BLOCK, 4) == (3 * BLOCK, 3 * BLOCK + 4 * BLOCK)
    assert allgather_buffer(BLOCK, 4) == 4 * BLOCK



def test_plan_prices_all_gather_cp_when_given_and_never_searches_it() -> None:
    from dlsched.job.scenario import PlanScenario

    base = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "global_batch": 4,
            "seq": 32768, "tp": 1, "pp": 1, "cp": 2, "zero": 3, "microbatch_size": 1,
            "recompute": "full", "baselines": False}
    given, = PlanScenario(**base, cp_algorithm="all-gather").run().rows
    assert given["cp_algorithm"] == "all-gather" and given["exposed_cp_s"] > 0
    searched, = PlanScenario(**base).run().rows
    assert searched["cp_algorithm"] in ("ring", "all-to-all")
