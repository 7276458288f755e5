"""``dlsched plan``'s time to train (``dlsched.goodput``): the field types of its settings in
``PlanScenario`` (counts with suffixes, "15.6T"; a duration, "10 min"; a storage preset or
bandwidth; each parsed at the edge), the time-to-train columns of a plan row, and the search's
plan chosen by ``--objective`` (its shortlist re-ranked)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, BeforeValidator

from dlsched.errors import ConfigError
from dlsched.goodput.checkpoints import load_storage
from dlsched.goodput.counts import parse_count
from dlsched.goodput.objective import SEARCH_RANKED, check_objective, choose, reason
from dlsched.goodput.time_to_train import Settings, time_to_train
from dlsched.inputs import Text
from dlsched.job.evaluation.evaluate import evaluate
from dlsched.units import parse_time

if TYPE_CHECKING:
    from dlsched.job.cluster import System
    from dlsched.job.evaluation.evaluate import Job, JobResult
    from dlsched.job.scenario import PlanScenario
    from dlsched.job.search import SearchResult


def _duration(value: Any) -> float:
    seconds = parse_time(value)
    if not seconds >= 0:
        raise ConfigError(f"restart: {value!r} is not accepted; accepted: a duration >= 0")
    return seconds


Count = Annotated[float, BeforeValidator(lambda v: parse_count(v, "")), Text()]
"""A positive count, "15.6T" or a number."""
Duration = Annotated[float, BeforeValidator(_duration), Text()]
"""Seconds from a duration ("10 min", "90 s") or a number of seconds."""
StorageName = Annotated[str, AfterValidator(lambda v: (load_storage(v), v)[1])]
"""A storage preset or a write bandwidth per node."""


def settings_of(scenario: PlanScenario) -> Settings:
    """The goodput settings of a scenario; ConfigError for an objective it cannot price."""
    settings = Settings(scenario.tokens, scenario.iterations, scenario.mtbf_gpu_hours,
                        scenario.pue, scenario.gpu_hour_price, scenario.storage,
                        scenario.checkpoint, scenario.restart)
    check_objective(scenario.objective, settings.wanted)
    return settings


def with_time_to_train(row: dict[str, Any], seq: int, cluster: System,
                       settings: Settings) -> dict[str, Any]:
    """``row`` with its time-to-train columns when ``settings`` asks for them."""
    if not settings.wanted:
        return row
    per_node = cluster.topology.dims[0].size
    return {**row, **time_to_train(row, seq, cluster.gpu.name, per_node, settings)}


def pick(rows: Sequence[dict[str, Any]], objective: str) -> tuple[int, str | None]:
    """Index of the row ``objective`` chooses among ``rows`` (the first is the
    iteration-best) and the reason when it is not the first."""
    index = choose(rows, objective)
    return index, (reason(rows[index], rows[0], objective) if index else None)


def choose_plan(job: Job, found: SearchResult, objective: str, seq: int, cluster: System,
                settings: Settings) -> tuple[JobResult, float, str | None]:
    """The search's plan under ``objective``: its winner (and simulated seconds) for
    ``upper`` and ``expected`` (the search ranks by them), else the shortlist re-ranked by the
    objective's column, the choice simulated; with the reason when it is not the winner."""
    if objective in SEARCH_RANKED or not settings.wanted:
        return found.best, found.simulated_s, None
    label = found.best.layout.label()
    candidates = [found.best, *(r for r in found.shortlist if r.layout.label() != label)]
    rows = [with_time_to_train({"layout": r.layout.label(), **r.row(job)}, seq, cluster,
                               settings) for r in candidates]
    index, why = pick(rows, objective)
    if index == 0:
        return found.best, found.simulated_s, None
    chosen = candidates[index]
    return chosen, evaluate(job, chosen.layout, fast=False).iteration_s, why
