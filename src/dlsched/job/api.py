"""The job planner's entry point: a scenario (``job.scenario.PlanScenario``, what the command
line, a sweep and the Python API give), the report ``dlsched plan`` prints.

``plan(scenario)`` evaluates the layout when every layout field is fixed (one row per
collective policy; without a ``pipeline_split`` the first of ``job.pipeline_split.SPLITS`` that
Megatron-Core accepts for its degrees, the even split when the layers divide), and otherwise
searches dlsched's space and, with ``baselines``, each baseline's (``job.search.SPACES``)
under the same evaluator, reporting dlsched's plan with the best baseline's layout and
``speedup_vs_best_baseline`` = the best baseline's time / dlsched's on the objective both were
ranked by (``speedup_basis``): the upper ends of their 90% intervals under ``--objective upper``
(the default), the predictions under ``expected``; ``speedup_vs_best_baseline_expected`` is
the ratio of the predictions either way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlsched.config import validate_document
from dlsched.errors import ConfigError
from dlsched.job.cluster import load_cluster
from dlsched.job.evaluation.evaluate import (
    Job,
    JobResult,
    check_run,
    evaluate,
    executed_times,
    pipeline_times,
)
from dlsched.job.evaluation.pipeline_split import feasible_splits
from dlsched.job.evaluation.pipeline_time import event_timeline
from dlsched.job.execution import LAYOUT_FIELDS, Execution
from dlsched.job.exports.torchtitan_config import torchtitan_fields
from dlsched.job.exports.writers import megatron_args, megatron_document, torchtitan_toml
from dlsched.job.intervals import envelope_notes, interval_columns
from dlsched.job.model_spec import Model, load_spec
from dlsched.job.ranking import Ranking, best_of, difference_note
from dlsched.job.recompute_note import recompute_note
from dlsched.job.refusals import check_plan, default_notes
from dlsched.job.search import BASELINES, SPACES, search
from dlsched.job.time_to_train_fields import choose_plan, settings_of, with_time_to_train
from dlsched.sim.timeline import Timeline

if TYPE_CHECKING:
    from dlsched.job.scenario import PlanScenario

LEFT_AT_DEFAULT = ("cp", "cp_algorithm", "ep", "expert_tp", "pipeline_split")
"""The layout fields a layout otherwise given (DP, or TP and PP) leaves at ``Execution``'s
defaults instead of searching them: such a layout is evaluated, not searched."""


@dataclass
class PlanReport:
    """Rows (one per collective policy), notes, and dlsched's plans for the exports."""

    title: str
    rows: list[dict[str, Any]]
    notes: tuple[str, ...]
    plans: list[tuple[Job, JobResult]] = field(default_factory=list)

    def timelines(self) -> list[tuple[str, str, Timeline]]:
        """Each plan's pipeline replica as the simulator runs it."""
        out = []
        for job, result in self.plans:
            times, _, _ = pipeline_times(job, result.layout)
            name = f"dlsched {result.layout.run.collective_policy}"
            executed = executed_times(job, result.layout, times)
            out.append((name, f"{name}: {result.layout.label()}", event_timeline(executed)))
        return out

    def megatron_args(self) -> str:
        """Megatron-LM arguments of the first plan."""
        job, result = self.plans[0]
        return megatron_args(job.spec, result.layout)

    def megatron_document(self) -> dict[str, list[str]]:
        """``megatron_args`` as JSON: its comment lines and its arguments (``plan --json``)."""
        return megatron_document(self.megatron_args())

    def torchtitan_toml(self) -> str:
        """A TorchTitan config of the first plan."""
        job, result = self.plans[0]
        return torchtitan_toml(job.spec, result.layout)


def plan(scenario: PlanScenario, policies: Sequence[str] | None = None) -> PlanReport:
    """Evaluate or search (module docstring): one row per collective policy of ``policies``
    (default: the scenario's ``collective_policy``); a TorchTitan config it names first
    replaces the fields it sets (``with_torchtitan_config``)."""
    if scenario.from_torchtitan is not None:
        scenario = with_torchtitan_config(scenario.model_copy(update={"from_torchtitan": None}),
                                          scenario.from_torchtitan)
    spec = with_seq(load_spec(scenario.model), scenario.seq)
    check_plan(scenario, spec)  # each mistake refused with its own cause, before any search
    cluster = load_cluster(scenario.cluster, scenario.gpus, scenario.gpu)
    job = Job(spec, cluster)
    searched = scenario.searched_execution()
    check_run(job, searched.run)  # the settings the model or the GPU refuses, before any layout
    fixed = searched.fixed()
    complete = all(name in fixed for name in LAYOUT_FIELDS
                   if name not in (*LEFT_AT_DEFAULT, "dp")) and (
        "dp" in fixed or ("tp" in fixed and "pp" in fixed))
    settings = settings_of(scenario)
    ranking = Ranking("upper" if scenario.objective == "upper" else "expected")
    rows, notes, plans = [], [], []
    for policy in (scenario.collective_policy,) if policies is None else tuple(policies):
        choice = searched.with_run(collective_policy=policy)
        if complete:
            layout = _complete_layout(choice, cluster.num_gpus, spec.layers, spec.mtp_layers)
            result = evaluate(job, layout)
            rows.append(_row(job, result, "given", None, None, ranking))
        else:
            found = search(job, choice, SPACES["dlsched"], ranking)
            result, simulated, why = choose_plan(job, found, scenario.objective, spec.seq,
                                                 cluster, settings)
            best = _best_baseline(job, choice, ranking) if scenario.baselines else None
            rows.append(_row(job, result, "dlsched", best, simulated, ranking))
            notes.extend(_baseline_note(rows[-1]))
            if ranking.upper:  # the point-best, to say when the choice differs
                why = why or difference_note(job, result, search(
                    job, choice, SPACES["dlsched"]).best, ranking)
            notes.extend([why] if why else [])
        plans.append((job, result))
        notes.extend(note for note in (*result.notes, recompute_note(job, result))
                     if note and note not in notes)
    rows = [with_time_to_train(row, spec.seq, cluster, settings) for row in rows]
    notes.extend(note for note in envelope_notes(rows) if note not in notes)
    notes.extend(default_notes(scenario, cluster))
    title = (f"{spec.name} on {cluster.name} ({cluster.gpu}, {scenario.precision}, "
             f"{scenario.attention} attention, {scenario.pipeline_p2p} pipeline transfers)")
    return PlanReport(title, rows, tuple(notes), plans)


def with_torchtitan_config(scenario: PlanScenario, path: str | Path) -> PlanScenario:
    """``scenario`` with the fields a TorchTitan job config at ``path`` fixes in place of its
    own (``job.exports.torchtitan_config``); ConfigError naming the TOML key it cannot price."""
    fields = torchtitan_fields(path)
    return validate_document(type(scenario), {**scenario.model_dump(), **fields},
                             f"--from-torchtitan {path}", "plan")


def with_seq(spec: Model, seq: int | None) -> Model:
    """``spec`` at sequence length ``seq`` (``--seq``, bounded by ``PlanScenario``; unchanged
    when None)."""
    return spec if seq is None else spec.replace(seq=seq)


def _complete_layout(choice: Execution, gpus: int, layers: int, mtp: int = 0) -> Execution:
    """``choice`` complete: DP the GPUs left, the pipeline split the first Megatron-Core
    accepts, the other fields not given at ``Execution``'s defaults."""
    fixed = choice.fixed()
    if "dp" not in fixed:
        fixed["dp"] = max(1, gpus // (fixed["tp"] * fixed.get("cp", 1) * fixed["pp"]))
    if "pipeline_split" not in fixed:  # the evaluator names the splits when none is accepted
        fixed["pipeline_split"] = next(iter(feasible_splits(layers, fixed["pp"],
                                                            fixed.get("chunks", 1), mtp=mtp)),
                                       "even")
    return Execution(**fixed, run=choice.run)


def _best_baseline(job: Job, choice: Execution, ranking: Ranking
                   ) -> tuple[str, JobResult] | None:
    """Each baseline's search ranked by ``ranking``, and the one it puts first."""
    found = {}
    for name in BASELINES:
        try:
            found[name] = search(job, choice, SPACES[name], ranking).best
        except ConfigError:  # a baseline whose space has no layout is skipped
            continue
    if not found:
        return None
    first = best_of(job, list(found.values()), ranking)
    return next((name, r) for name, r in found.items() if r is first)


def _row(job: Job, result: JobResult, planner: str, best: tuple[str, JobResult] | None,
         simulated: float | None, ranking: Ranking) -> dict[str, Any]:
    row = {"planner": planner, "layout": result.layout.label(), **result.row(job),
           **interval_columns(job, result)}
    row["simulated_iteration_s"] = simulated
    if best is None:
        row["speedup_vs_best_baseline"] = None
        return row
    name, other = best
    expected = other.iteration_s / result.iteration_s
    row.update({"best_baseline": name, "best_baseline_layout": other.layout.label(),
                "best_baseline_iteration_s": other.iteration_s,
                "speedup_vs_best_baseline_expected": expected,
                "speedup_vs_best_baseline": expected, "speedup_basis": "prediction"})
    if ranking.upper:  # the gain on what both were ranked by (module docstring)
        ours, theirs = ranking.high(job, result), ranking.high(job, other)
        row["best_baseline_iteration_high_s"] = theirs
        if math.isfinite(ours) and math.isfinite(theirs):
            row.update({"speedup_vs_best_baseline": theirs / ours,
                        "speedup_basis": "90% upper end"})
    return row


def _baseline_note(row: dict[str, Any]) -> list[str]:
    """The line that names the best baseline and what the speedup column compares."""
    if row.get("best_baseline") is None:
        return []
    return [f"vs best baseline: {row['best_baseline']} {row['best_baseline_layout']}, "
            f"{row['speedup_vs_best_baseline']:.3f}x on the {row['speedup_basis']} "
            f"({row['speedup_vs_best_baseline_expected']:.3f}x on the predictions)"]


__all__ = ["PlanReport", "plan"]
