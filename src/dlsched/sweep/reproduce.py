"""Run a paper reproduction through the sweep runner: each experiment scenario (a frozen
dataclass) is one stored row whose result is the list of table rows it produced (as JSON), so
reproductions get every executor, batching, committed rows and resume for free.

A reproduction only has to expose its scenarios and ``run_scenario(scenario) -> list[dict]``
(a module-level function, so it reaches worker processes by reference).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from dlsched.errors import ConfigError
from dlsched.sweep.runner import SweepJob
from dlsched.sweep.store import ResultStore

RunScenario = Callable[[Any], list[dict[str, Any]]]
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


def collect_rows(job: SweepJob, store: ResultStore) -> tuple[list[dict[str, Any]], list[str]]:
    """All table rows in scenario order, and the error texts of failed scenarios."""
    stored = store.results(RESULT)
    rows: list[dict[str, Any]] = []
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
