"""An evaluation walks its pipeline replica once: the iteration and the exposed pipeline time
(``pp_s``: what the transfers add to the replica) come from one two-lane walk, equal to the
full walks of the replica with its transfers and without them (issue 47 item 4)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dlsched.job.cluster import load_cluster
from dlsched.job.evaluation import evaluate as evaluate_module
from dlsched.job.evaluation.evaluate import Job, evaluate
from dlsched.job.evaluation.pipeline_steady import replica_timings
from dlsched.job.evaluation.pipeline_walk import walk_pipeline
from dlsched.job.evaluation.replica import executed_times, replica_parts
from dlsched.job.execution import Execution
from dlsched.job.model_spec import bundled_specs
from dlsched.job.run_settings import RunSettings


@pytest.mark.parametrize("schedule, chunks, pp", [("1f1b", 1, 16), ("interleaved", 2, 8),
                                                  ("zb-h1", 1, 8), ("gpipe", 1, 4),
                                                  ("dualpipev", 2, 4)])
def test_one_walk_gives_the_iteration_and_the_exposed_pipeline_time(
        schedule: str, chunks: int, pp: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """GPT-3 175B on 1,024 A100s: one walk per evaluation, and ``pp_s`` / ``quiet_s`` are
    what the full walks of the executed replica and of the one without transfers give."""
    job = Job(bundled_specs()["gpt3-175b"], load_cluster("dgx-a100", 1024, None))
    layout = Execution(8, pp, 1024 // (8 * pp), 1, 1536 if schedule != "dualpipev" else 1024,
                       chunks, schedule, "full", run=RunSettings("fp16"))
    walks = []

    def counted(times: object, quiet: object) -> object:
        walks.append(times)
        return replica_timings.__wrapped__(times, quiet)

    monkeypatch.setattr(evaluate_module, "replica_timings", counted)
    result = evaluate(job, layout)
    assert len(walks) == 1
    times = replica_parts(job, layout).times
    executed = executed_times(job, layout, times)
    full = walk_pipeline(executed)
    quiet = walk_pipeline(replace(times, send=(0.0,) * len(times.send)))
    assert result.quiet_s == pytest.approx(quiet.end, rel=1e-12)
    assert result.replica.end == pytest.approx(full.end, rel=1e-12)
    assert result.exposed["pp_s"] == pytest.approx(max(0.0, full.end - quiet.end), rel=1e-9,
                                                   abs=1e-12)
    assert result.exposed["pp_s"] > 0  # PP > 1: the transfers are not free
