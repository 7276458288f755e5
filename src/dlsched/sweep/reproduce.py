"""The one runner of the paper reproductions: a paper module (``experiments.reproduction``)
through the sweep runner. Each scenario is one stored row whose result is the list of table
rows it produced (as JSON), so every reproduction gets every executor, batching, committed
rows and resume; ``dlsched reproduce`` (with its progress bar and results file) and the Python
``reproduce`` below share ``paper_job`` and ``reproduced``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from dlsched.errors import ConfigError, RunFailure
from dlsched.experiments.reproduction import Paper, Reproduced, Rows
from dlsched.sweep.executors import open_executor
from dlsched.sweep.runner import SweepJob, run_sweep
from dlsched.sweep.store import ResultStore

RunScenario = Callable[[Any], Rows]
RESULT = "rows_json"


def _json_value(value: Any) -> Any:
    """numpy scalars as Python numbers, anything else JSON cannot hold as text."""
    return value.item() if hasattr(value, "item") else str(value)


def _rows_payload(run_scenario: RunScenario, params: dict[str, Any]) -> dict[str, Any]:
    """Evaluate one scenario on a worker; its rows travel and are stored as JSON text."""
    return {RESULT: json.dumps(run_scenario(params["object"]), default=_json_value)}


def reproduction_job(name: str, scenarios: Sequence[Any], run_scenario: RunScenario) -> SweepJob:
    """A SweepJob whose scenarios are ``scenarios`` (identified by their repr)."""
    params = [{"scenario": repr(s), "object": s} for s in scenarios]
    return SweepJob(name, f"reproduce-{name}", partial(_rows_payload, run_scenario), params,
                    ("scenario",), (RESULT,), {"name": name, "domain": f"reproduce-{name}"},
                    {"scenario": "TEXT", RESULT: "TEXT"})


def paper_job(paper: Paper, options: Any) -> SweepJob:
    """The job of a paper run: its ``scenarios(options)`` through its ``run_scenario``."""
    return reproduction_job(paper.NAME, paper.scenarios(options), paper.run_scenario)


def collect_rows(job: SweepJob, store: ResultStore) -> tuple[Rows, list[str]]:
    """All table rows in scenario order, and the error texts of failed scenarios."""
    stored = store.results(RESULT)
    rows: Rows = []
    errors: list[str] = []
    for key, _, params in job.tasks():
        if key not in stored:
            raise ConfigError(f"db: scenario {params['scenario']} has no stored result")
        result, error = stored[key]
        if result is None:
            errors.append(f"{params['scenario']}: {error}")
        else:
            rows += json.loads(result)
    return rows, errors


def reproduced(paper: Paper, options: Any, rows: Rows, errors: Sequence[str]) -> Reproduced:
    """The paper's document of ``rows``; RunFailure (exit 1) when every scenario failed."""
    if errors and not rows:
        raise RunFailure(f"{paper.NAME}: every scenario failed ({len(errors)}; the first: "
                         f"{errors[0]}), so there is nothing to show")
    return Reproduced(paper, options, paper.document(rows, options), tuple(errors))


def reproduce(paper: Paper, options: Any = None, executor: str = "process",
              workers: int | None = None, address: str | None = None) -> Reproduced:
    """Run every scenario of ``paper`` under ``options`` on ``executor`` (``workers`` local
    processes, default all cores; or the cluster at ``address``), keeping the results in
    memory, and summarize them: ``dlsched reproduce`` without a results file or tables."""
    job = paper_job(paper, options)
    with ResultStore(":memory:", job.columns, job.meta) as store, \
            open_executor(executor, workers, address) as engine:
        run_sweep(job, store, engine)
        return reproduced(paper, options, *collect_rows(job, store))
