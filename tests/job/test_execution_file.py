"""``dlsched plan --execution FILE``: a user's execution file fixes layout fields as the options
do, an option given overrides it, and a bad file is refused in one line naming the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dlsched.errors import ConfigError
from dlsched.job.execution import LAYOUT_FIELDS, load_execution
from dlsched.job.scenario import PlanScenario

RUN = {"tp": 2, "pp": 2, "dp": 4, "chunks": 1, "microbatch_size": 2, "global_batch": 64,
       "schedule": "1f1b", "recompute": "full", "sequence_parallel": False, "zero": 1}
JOB = {"model": "gpt-1.7b", "cluster": "dgx-a100", "gpus": 16, "precision": "fp16"}


def _write(tmp_path: Path, data: object, name: str = "run.yaml") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))  # JSON is YAML
    return str(path)


def test_a_file_plans_what_the_same_options_plan(tmp_path: Path) -> None:
    """The file's fields reach the scenario: the same given layout, the same iteration."""
    from_file, = PlanScenario(**JOB, execution=_write(tmp_path, RUN)).run().rows
    from_options, = PlanScenario(**JOB, **RUN).run().rows
    assert from_file["layout"] == from_options["layout"] == "TP2 PP2 DP4 v1 mb2 1f1b full zero1"
    assert from_file["iteration_s"] == from_options["iteration_s"]
    assert from_file["planner"] == "given"


def test_an_option_given_overrides_the_file(tmp_path: Path) -> None:
    """``--zero 0`` beside a file that says ZeRO 1; a field the file leaves out is searched."""
    path = _write(tmp_path, RUN)
    assert PlanScenario(**JOB, execution=path, zero=0).fixed()["zero"] == 0
    partial = {k: v for k, v in RUN.items() if k != "zero"}
    scenario = PlanScenario(**JOB, execution=_write(tmp_path, partial, "partial.yaml"))
    assert "zero" not in scenario.fixed() and scenario.global_batch == 64


def test_the_file_holds_any_subset_of_the_layout_fields(tmp_path: Path) -> None:
    """Each field left out is None (searched)."""
    loaded = load_execution(_write(tmp_path, {"tp": 8, "global_batch": 512}))
    assert loaded.fixed() == {"tp": 8, "global_batch": 512}
    assert set(loaded.missing()) == set(LAYOUT_FIELDS) - {"tp", "global_batch", "expert_tp"}


@pytest.mark.parametrize(("data", "field"), [
    ({"tp": 2, "tensor_parallel": 4}, "tensor_parallel"),
    ({"tp": "two"}, "execution.tp"),
    ({"schedule": "round-robin"}, r": schedule: 'round-robin' is not accepted"),
    ([1, 2], "a mapping of layout fields")])
def test_a_bad_file_is_refused_naming_the_file_and_the_field(tmp_path: Path, data: object,
                                                            field: str) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError, match=field) as error:
        load_execution(path)
    assert path in str(error.value) and len(str(error.value).splitlines()) == 1


def test_the_command_line_takes_the_file_and_refuses_a_missing_one(run_cli: Any,
                                                                  tmp_path: Path) -> None:
    path = _write(tmp_path, RUN)
    code, out, err = run_cli("plan", "--model", "gpt-1.7b", "--gpus", "16", "--precision",
                             "fp16", "--execution", path, "--json")
    assert code == 0, err
    assert json.loads(out)["rows"][0]["layout"] == "TP2 PP2 DP4 v1 mb2 1f1b full zero1"
    code, _, err = run_cli("plan", "--gpus", "16", "--execution", str(tmp_path / "no.yaml"))
    assert code == 2 and "--execution" in err and len(err.strip().splitlines()) == 1


def test_the_example_files_plan_and_sweep_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/plan/'s three files give the given layout through ``plan``, and the example
    grid naming them (paths from the repository root) gives the same row per scenario."""
    from dlsched.sweep.domains import get_domain
    from dlsched.sweep.grid import load_grid

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    files = {"model": "my-model.yaml", "cluster": "my-cluster.yaml", "execution": "my-run.yaml"}
    scenario = PlanScenario(gpu="a100", precision="fp16",
                            **{k: f"examples/plan/{v}" for k, v in files.items()})
    row, = scenario.run().rows
    assert row["layout"] == "TP2 PP2 DP4 v1 mb2 1f1b full zero1" and row["planner"] == "given"
    grid = load_grid("examples/sweeps/plan-files.yaml")
    params = grid.scenario(0)
    assert (params["tp"], params["pp"], params["dp"], params["zero"]) == (2, 2, 4, 1)
    metrics = get_domain("plan").evaluate(params)
    assert metrics["iteration_s"] == row["iteration_s"]


def test_the_file_is_flat_and_holds_run_settings_too(tmp_path: Path) -> None:
    """Run settings sit beside the layout fields (``precision: fp16`` next to ``tp: 2``): the
    file's execution carries them as ``run``, the scenario takes them unless an option gives
    another value, and those the file leaves out stay at the scenario's defaults."""
    path = _write(tmp_path, {**RUN, "precision": "fp16", "grad_reduce": "fp16",
                             "pipeline_p2p": "blocking"})
    loaded = load_execution(path)
    assert (loaded.run.precision, loaded.run.grad_reduce, loaded.run.pipeline_p2p) == (
        "fp16", "fp16", "blocking")
    assert loaded.fixed() == RUN and loaded.flat()["precision"] == "fp16"
    scenario = PlanScenario(model="gpt-1.7b", gpus=16, execution=path)
    assert (scenario.precision, scenario.pipeline_p2p, scenario.dp_policy) == (
        "fp16", "blocking", "usbyte")
    assert scenario.searched_execution().run.grad_reduce == "fp16"
    given = PlanScenario(model="gpt-1.7b", gpus=16, execution=path, pipeline_p2p="overlapped")
    assert given.pipeline_p2p == "overlapped" and given.precision == "fp16"
    with pytest.raises(ConfigError, match=r": grad_reduce: fp16 needs"):  # the file's settings
        load_execution(_write(tmp_path, {"precision": "bf16", "grad_reduce": "fp16"}, "b.yaml"))
