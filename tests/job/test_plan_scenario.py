"""One job scenario for the command line, the Python API and a sweep: ``dlsched plan``'s
options are ``PlanScenario``'s fields, and the three give the same plan."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dlsched.errors import ConfigError
from dlsched.job.scenario import LAYOUT_FIELDS, PlanScenario
from dlsched.sweep.domains import PLAN_METRICS, get_domain

GIVEN = {"model": "gpt-1.7b", "cluster": "dgx-a100", "gpus": 16, "global_batch": 64,
         "precision": "fp16", "tp": 2, "pp": 2, "dp": 4, "chunks": 1, "microbatch_size": 2,
         "schedule": "1f1b", "recompute": "full", "sequence_parallel": False, "zero": 1}


def _options(values: dict[str, Any]) -> list[str]:
    args = []
    for name, value in values.items():
        option = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            args.append(option if value else option.replace("--", "--no-", 1))
        else:
            args += [option, str(value)]
    return args


def test_the_command_line_and_the_api_plan_the_same_layout(run_cli: Any) -> None:
    code, out, err = run_cli("plan", *_options(GIVEN), "--collective-policy",
                             "baseline,dlsched", "--json")
    assert code == 0, err
    printed = json.loads(out)["rows"]
    scenario = PlanScenario(**GIVEN)
    api = scenario.run(("baseline", "dlsched")).rows
    assert [row["iteration_s"] for row in printed] == [row["iteration_s"] for row in api]
    assert [row["collective_policy"] for row in printed] == ["baseline", "dlsched"]
    assert printed[0]["layout"] == "TP2 PP2 DP4 v1 mb2 1f1b full zero1"
    one, = scenario.run().rows  # default: the scenario's own policy
    assert one["iteration_s"] == api[0]["iteration_s"]


def test_a_sweep_row_is_the_plans_row() -> None:
    domain = get_domain("plan")
    assert domain.param_names == tuple(PlanScenario.model_fields)
    metrics = domain.evaluate(dict(PlanScenario(**GIVEN)))
    assert tuple(metrics) == PLAN_METRICS
    row, = PlanScenario(**GIVEN).run().rows
    assert metrics["iteration_s"] == row["iteration_s"]
    assert (metrics["tp"], metrics["pp"], metrics["dp"]) == (2, 2, 4)
    assert metrics["speedup_vs_best_baseline"] is None  # a given layout: nothing searched


def test_fixed_holds_exactly_the_layout_fields_given() -> None:
    assert PlanScenario().fixed() == {}
    fixed = PlanScenario(**GIVEN).fixed()
    assert set(fixed) <= set(LAYOUT_FIELDS)
    assert fixed == {name: GIVEN[name] for name in LAYOUT_FIELDS
                     if name in GIVEN and name != "global_batch"}


def test_an_unknown_field_or_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="tensor_parallel"):
        PlanScenario(tensor_parallel=8)
    with pytest.raises(ConfigError, match=r"^collective_policy: 'nccl' is not accepted"):
        PlanScenario(**GIVEN).run(("nccl",))  # the field (plan's edge: --collective-policy)


def test_a_plan_sweep_with_a_bad_value_is_refused_before_it_runs(run_cli: Any,
                                                                 tmp_path: Any) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text("name: bad\ndomain: plan\naxes:\n  schedule: [1f1b, round-robin]\n"
                    "fixed: {cluster: dgx-h100, gpus: 8, model: llama3-8b, global_batch: 8}\n")
    code, _, err = run_cli("sweep", "run", str(grid), "--db", str(tmp_path / "out.db"))
    assert code == 2 and "unknown schedule 'round-robin'" in err
    assert not (tmp_path / "out.db").exists()


def test_the_table_shows_the_communication_a_layout_has(run_cli: Any) -> None:
    """TP, PP and DP always; CP, A2A and ZeRO-3 columns only where a row exposes them; the
    table is as wide as the CLI's console (it was squeezed to 80 columns when piped)."""
    code, out, err = run_cli("plan", *_options(GIVEN))
    assert code == 0, err
    header = " ".join(line for line in out.splitlines() if "┃" in line)
    assert "TP" in header and "PP" in header and "A2A" not in header and "ZeRO-3" not in header
    assert max(len(line) for line in out.splitlines()) > 80
    moe = {**GIVEN, "model": "mixtral-8x7b", "cluster": "dgx-h100", "gpus": 16, "tp": 1,
           "pp": 2, "dp": 8, "microbatch_size": 1, "global_batch": 16, "recompute": "full"}
    code, out, err = run_cli("plan", *_options(moe), "--ep", "8", "--seq", "1024")
    assert code == 0, err
    assert "A2A" in " ".join(line for line in out.splitlines() if "┃" in line)


def test_the_speedup_over_the_best_baseline_is_on_the_ranking_objective() -> None:
    """Ranked by the upper ends (the default), the speedup column is the ratio of the two
    plans' 90% upper ends, the ratio of predictions beside it; ranked by the predictions the
    two are one number."""
    given = {"model": "gpt-1.7b", "cluster": "dgx-a100", "gpus": 16, "global_batch": 64,
             "precision": "fp16", "tp": 2}
    upper, = PlanScenario(**given).run().rows
    assert upper["speedup_basis"] == "90% upper end"
    assert upper["speedup_vs_best_baseline"] == pytest.approx(
        upper["best_baseline_iteration_high_s"] / upper["iteration_high_s"])
    assert upper["speedup_vs_best_baseline_expected"] == pytest.approx(
        upper["best_baseline_iteration_s"] / upper["iteration_s"])
    assert upper["speedup_vs_best_baseline"] >= 1 - 1e-12  # dlsched's space holds the baselines'
    point, = PlanScenario(**given, objective="expected").run().rows
    assert point["speedup_basis"] == "prediction"
    assert point["speedup_vs_best_baseline"] == point["speedup_vs_best_baseline_expected"]
    assert point["speedup_vs_best_baseline"] >= 1 - 1e-12


def test_a_given_layout_and_module_list_are_searched_as_given(run_cli: Any) -> None:
    """``--pipeline-split layout:...`` and ``--recompute modules:...`` (Megatron-Core's
    options) hold in the searched plan and in the Megatron-Core baseline, which are the only
    spaces that run them: Qwen3 30B-A3B's 48 layers on 4 stages as 11, 13, 13, 11."""
    code, out, err = run_cli("plan", "--model", "qwen3-30b-a3b", "--cluster", "dgx-h100",
                             "--gpus", "32", "--pp", "4", "--ep", "8", "--global-batch", "256",
                             "--pipeline-split", "layout:Et*11|t*13|t*13|t*11L",
                             "--recompute", "modules:moe_act,layernorm", "--json")
    assert code == 0, err
    row, = json.loads(out)["rows"]
    assert row["pipeline_split"] == "layout:Et*11|t*13|t*13|t*11L"
    assert row["recompute"] == "modules:moe_act,layernorm"
    assert row["best_baseline"] == "megatron-core"
    assert row["best_baseline_layout"].endswith("modules:moe_act,layernorm zero1 "
                                                "layout:Et*11|t*13|t*13|t*11L")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("pipeline_split", "layout:Et*4|(t*4", r"pipeline_split: layout 'Et\*4\|\(t\*4': "),
    ("pipeline_split", "uneven", r"pipeline_split: 'uneven' is not accepted; accepted: even"),
    ("recompute", "modules:attention", r"recompute: attention is not a module; accepted: "),
    ("recompute", "most", r"recompute: 'most' is not accepted; accepted: none, selective, "
                          r"full, selective-op, modules:<list>"),
])
def test_a_bad_layout_or_module_list_is_refused_naming_the_field(field: str, value: str,
                                                                 message: str) -> None:
    with pytest.raises(ValueError, match=message):  # pydantic's, carrying the ConfigError's
        PlanScenario(**{**GIVEN, field: value})


def test_a_gpu_alone_plans_on_its_own_node_preset(tmp_path) -> None:
    """``--gpu h200`` without ``--cluster``: DGX H200 nodes (not H200s in DGX A100 nodes), and
    the plan says so; a cluster given wins; no GPU, or a GPU file no preset carries:
    dgx-a100."""
    assert PlanScenario(gpu="h200").cluster == "dgx-h200"
    assert PlanScenario(gpu="gb200").cluster == "gb200-nvl72"
    assert PlanScenario(gpu="h100-hbm2e-96gb").cluster == "grand-teton-h100"
    assert PlanScenario(gpu="h200", cluster="dgx-h100").cluster == "dgx-h100"
    assert PlanScenario().cluster == "dgx-a100"
    assert PlanScenario(gpu=str(tmp_path / "mine.yaml")).cluster == "dgx-a100"
    report = PlanScenario(model="gpt-1.7b", gpu="h100", gpus=8, global_batch=16, tp=1, pp=1,
                          microbatch_size=1, recompute="none", zero=0).run()
    assert "cluster: dgx-h100, the node preset of --gpu h100 when no --cluster is given " \
           "(--cluster)" in report.notes
