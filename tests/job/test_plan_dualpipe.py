"""``dlsched plan --schedule zb-v|dualpipe|dualpipev``: the job evaluator's fast walk equal to
the pipeline simulation, the expert all-to-alls an overlapped pair hides, and the memory of two
stages per rank (DeepSeek-V3 report, Table 2)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlsched.errors import ConfigError
from dlsched.job.evaluation.unit_walk import UNIT_SCHEDULES
from dlsched.job.memory.per_gpu import memory_per_gpu
from dlsched.job.scenario import PlanScenario

PLAN = {"cluster": "dgx-h100", "gpus": 64, "global_batch": 256, "microbatch_size": 1,
        "recompute": "full", "sequence_parallel": True, "zero": 0}


@pytest.mark.parametrize("schedule", UNIT_SCHEDULES)
def test_plan_fast_walk_equals_the_simulation(schedule: str) -> None:
    """``dlsched plan --schedule zb-v|dualpipe|dualpipev`` on an MoE model with EP over
    nodes: the fast walk's iteration equals the pipeline simulator's (which runs the same
    units, each pair hiding its chunks' all-to-alls: ``Chain.overlap_seconds``); the
    iteration is never below the plan's bound."""
    row = PlanScenario(model="mixtral-8x7b", tp=2, pp=4, dp=8, ep=8, schedule=schedule,
                       **PLAN).run().rows[0]
    assert row["schedule"] == schedule
    assert row["iteration_s"] == pytest.approx(row["simulated_iteration_s"], rel=1e-9)
    assert row["iteration_s"] >= row["bound_s"]


def test_dualpipe_hides_all_to_alls_that_one_f_one_b_exposes() -> None:
    """Same MoE layout: 1F1B exposes every dispatch and combine; DualPipe and DualPipeV
    expose less of them (only their chunks that run alone), and ZB-V, which has no pairs,
    exposes them all."""
    rows = {s: PlanScenario(model="mixtral-8x7b", tp=2, pp=4, dp=8, ep=8, schedule=s,
                            **PLAN).run().rows[0] for s in ("1f1b", *UNIT_SCHEDULES)}
    exposed = {s: row["exposed_ep_a2a_s"] for s, row in rows.items()}
    assert exposed["zb-v"] == pytest.approx(exposed["1f1b"])
    assert 0 < exposed["dualpipe"] < exposed["1f1b"]
    assert 0 < exposed["dualpipev"] < exposed["1f1b"]


def test_dualpipe_memory_two_stages_and_pp_plus_one_in_flight() -> None:
    """DualPipe's rank 0 holds stage 0 (the embedding) and stage pp - 1 (the head): its
    weights are 1F1B's rank 0 and rank pp - 1 together (Table 2: 2x parameters), and it
    holds PP + 1 chunk-microbatches in flight at its peak; ZB-V's rank 0 2 pp over its two
    chunks, DualPipeV's 2 pp + 1."""
    job, result = PlanScenario(model="mixtral-8x7b", tp=2, pp=4, dp=8, ep=8, schedule="1f1b",
                               **PLAN).run().plans[0]
    spec, base = job.spec, result.layout
    dual = replace(base, schedule="dualpipe")
    one = [memory_per_gpu(spec, base, "bf16", stage) for stage in (0, 3)]
    assert memory_per_gpu(spec, dual, "bf16", 0).weights == pytest.approx(
        one[0].weights + one[1].weights)
    assert sum(memory_per_gpu(spec, dual, "bf16", 0).in_flight) == 4 + 1
    for schedule, held in (("zb-v", 8), ("dualpipev", 9)):
        v = replace(base, schedule=schedule, chunks=2)
        assert sum(memory_per_gpu(spec, v, "bf16", 0).in_flight) == held


@pytest.mark.parametrize(("options", "message"), [
    ({"pp": 4, "dp": 2, "microbatch_size": 1, "global_batch": 12, "schedule": "dualpipe"},
     "^global_batch: 12 sequences .* 6 per replica; dualpipe on 4 ranks needs an even"),
    ({"pp": 4, "dp": 2, "global_batch": 64, "schedule": "zb-v", "chunks": 4},
     "^chunks: the zb-v schedule runs 2"),
    ({"pp": 1, "dp": 8, "global_batch": 64, "schedule": "dualpipev"}, "^pp: the dualpipev"),
    ({"pp": 3, "global_batch": 64, "schedule": "dualpipe"}, "pp: DualPipe needs an even")])
def test_refused_before_any_search(options: dict, message: str) -> None:
    """A schedule its degrees cannot run is refused with its cause (``job.refusals``), not
    as a layout that does not fit."""
    with pytest.raises(ConfigError, match=message):
        PlanScenario(model="llama3-8b", cluster="dgx-h100", gpus=16 if options["pp"] != 3
                     else 24, tp=2, **options).run()
