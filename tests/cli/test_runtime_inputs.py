"""The torch runtime commands refuse bad input in one line before any rank is spawned."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

RING = ("--network", "ring:1Gb/s,20us")


def _errors(err: str) -> list[str]:
    """stderr without the deprecation notes of old command spellings."""
    return [line for line in err.strip().splitlines() if not line.startswith("note: ")]


@pytest.fixture
def no_spawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if any rank would be spawned."""
    spawn = importlib.import_module("dlsched.runtime.spawn")  # the module, not the function

    def never(*_: Any, **__: Any) -> None:
        raise AssertionError("ranks were spawned for input that should be refused")

    monkeypatch.setattr(spawn, "spawn", never)


def test_train_refuses_a_preset_for_another_rank_count(run_cli, no_spawn) -> None:
    """usbyte-8 was measured on 8 ranks: --workers 2 is refused as dataparallel refuses it."""
    code, _, err = run_cli("run", "dataparallel", "--network", "usbyte-8", "--workers", "2")
    assert code == 2 and "does not match network 'usbyte-8'" in err and "accepted: 8" in err


@pytest.mark.parametrize("lr", ["nan", "inf", "0", "-0.1", "1e308"])
def test_train_refuses_a_learning_rate_that_is_not_finite_and_positive(run_cli, no_spawn,
                                                                       lr: str) -> None:
    code, _, err = run_cli("run", "dataparallel", *RING, "--lr", lr)
    assert code == 2 and "--lr" in err and "accepted" in err


def test_train_config_refuses_a_nan_learning_rate() -> None:
    from dlsched.errors import ConfigError
    from dlsched.runtime.dataparallel.train import TrainConfig

    with pytest.raises(ConfigError, match="lr"):
        TrainConfig(lr=float("nan"))


def not_a_model() -> str:
    """A factory that returns no module."""
    return "hello"


def small_linear() -> Any:
    """A model taking 3 features (refused for a batch of 5 features)."""
    import torch

    return torch.nn.Linear(3, 4)


@pytest.mark.parametrize(("module", "shape", "needle"), [
    ("nope", "", "module: 'nope' is not one of"),
    ("no_such_package_xyz:factory", "2,3", "cannot load"),
    (f"{__name__}:not_a_model", "2,3", "returned a str"),
    ("math:pi", "2,3", "'math:pi' is a float"),
    ("os:getcwd", "2,3", "'os:getcwd' returned a str"),
    ("os:chdir", "2,3", "calling 'os:chdir' failed with TypeError"),
    (f"{__name__}:small_linear", "2,5", "fails on a batch of shape (2, 5)"),
])
def test_train_refuses_a_module_that_is_no_model_before_spawning(
        run_cli, no_spawn, module: str, shape: str, needle: str) -> None:
    """--module is built and run on one batch in the parent: a missing module, a function
    that returns no torch module, a non-function, or a shape the module cannot take exits 2
    in one line, without spawning ranks."""
    pytest.importorskip("torch", reason="the runtime commands need torch")
    code, _, err = run_cli("run", "dataparallel", "--module", module, "--input-shape", shape,
                           *RING, "--policy", "wfbp")
    assert code == 2, err
    assert needle in err and len(_errors(err)) == 1
    assert err.startswith("error: --module: "), err  # named by the option (was 'module:')


@pytest.mark.parametrize(("args", "message"), [
    (("profile", "--batch-size", "0"), "--batch-size: batch size 0 is out of range"),
    (("profile", "--input-shape", "abc"), "--input-shape: 'abc' is not understood"),
    (("profile", "--optimizer", "lbfgs"), "--optimizer: 'lbfgs'; accepted: sgd, adam, none"),
    (("run", "dataparallel", "--network", "fast"), "--network: 'fast' is not understood"),
    (("run", "dataparallel", "--policy", "fastest", *RING), "--policy: unknown ['fastest']"),
])
def test_torch_options_are_named_before_torch_runs(run_cli, no_spawn, args, message) -> None:
    """The torch commands' bad options: one line starting with the option (were the fields,
    'batch-size:', 'input-shape:', 'optimizer:', 'network:', 'policy:')."""
    code, _, err = run_cli(*args)
    assert code == 2 and err.startswith(f"error: {message}"), err


def test_pipeline_run_refuses_a_plan_naming_no_model(tmp_path: Path, run_cli,
                                                     no_spawn) -> None:
    """A plan file whose ``model`` is a function that does not build a PipelineModel: exit 2,
    one line, before any rank starts."""
    pytest.importorskip("torch", reason="the runtime commands need torch")
    from dlsched.pipeline.plans.plan import PipelinePlan, Stage
    from dlsched.pipeline.plans.plan_file import SavedPlan, save_plan

    plan = PipelinePlan("gpipe", (Stage(0, 1, (0,)),), (tuple(_orders()),), 1)
    saved = SavedPlan(plan, "os:getcwd", "cpu", ("r0",), 1, ("b0",), (4.0,), (4.0,), 0.001)
    path = tmp_path / "plan.json"
    save_plan(saved, path)
    code, _, err = run_cli("run", "pipeline", str(path))
    assert code == 2, err
    assert "calling 'os:getcwd' failed" in err and len(_errors(err)) == 1


def _orders() -> list[Any]:
    from dlsched.pipeline.plans.actions import Action

    return [Action.parse("0F0"), Action.parse("0B0")]


def test_torch_refusals_are_found_before_spawning() -> None:
    """A table torch's own checks reject (a rank that runs a backward before its forward)
    is refused here with torch's first line, not on the ranks."""
    pytest.importorskip("torch", reason="the runtime commands need torch")
    from dlsched.errors import ConfigError
    from dlsched.pipeline.plans.actions import Action
    from dlsched.pipeline.plans.torch_export import TorchSchedule
    from dlsched.runtime.pipeline.run import check_torch_schedule

    rows = ((Action.parse("0B0"), Action.parse("0F0")),)
    schedule = TorchSchedule("hand", rows, ((0, 1),), (0,), (0,), 1, 1)
    with pytest.raises(ConfigError) as refused:
        check_torch_schedule(schedule, "order.csv")
    assert str(refused.value).startswith("order.csv: torch.distributed.pipelining refuses the "
                                         "hand schedule: Rank 0, step 0: Running Full Backward")
    assert "\n" not in str(refused.value)


def _network_file(path: Path, ranks: int) -> Path:
    from dlsched.runtime.dataparallel.calibrate import network_document, write_network

    samples = [(4096, 1e-4), (65536, 3e-4), (2**20, 1.1e-3), (2**22, 4e-3)]
    write_network(network_document(samples, ranks, "t", "gloo", "piecewise"), path)
    return path


def test_the_readme_chain_calibrate_then_train_uses_matching_ranks(tmp_path: Path, run_cli,
                                                                   monkeypatch) -> None:
    """README: ``calibrate --workers 2`` then ``run dataparallel --workers 2 --network
    net.yaml`` reaches the ranks with 2; without --workers the file's 4 ranks are spawned;
    a 4-rank piecewise fit used at 2 is refused, saying how to calibrate for 2."""
    pytest.importorskip("torch", reason="the runtime commands need torch")
    spawn = importlib.import_module("dlsched.runtime.spawn")  # the module, not the function

    spawned: list[int] = []

    class Spawned(BaseException):
        """The ranks would start here (the training itself is not run)."""

    def record(fn: Any, world_size: int, *_: Any) -> None:
        spawned.append(world_size)
        raise Spawned

    monkeypatch.setattr(spawn, "spawn", record)
    two, four = _network_file(tmp_path / "two.yaml", 2), _network_file(tmp_path / "four.yaml", 4)
    for network, extra in ((two, ("--workers", "2")), (four, ())):
        with pytest.raises(Spawned):
            run_cli("run", "dataparallel", "--network", str(network), *extra, "--policy",
                    "wfbp")
    assert spawned == [2, 4]
    code, _, err = run_cli("run", "dataparallel", "--network", str(four), "--workers", "2")
    assert code == 2 and "fitted on 4 ranks" in err and "dlsched calibrate --workers 2" in err


def test_pipeline_run_names_the_file_torch_refuses(tmp_path: Path, run_cli, no_spawn,
                                                   monkeypatch) -> None:
    """When torch's own schedule check refuses a table (here made to refuse every table),
    ``run pipeline`` exits 2 with one line naming the plan file, before spawning (it was a
    98-line traceback from the ranks)."""
    pytest.importorskip("torch", reason="the runtime commands need torch")
    from dlsched.pipeline.plans.plan import PipelinePlan, Stage
    from dlsched.pipeline.plans.plan_file import save_plan
    from dlsched.pipeline.plans.schedules import gpipe_orders
    from dlsched.runtime.pipeline import run as pipeline_run
    from dlsched.runtime.pipeline.model import load_model

    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("Rank 1, step 0: Running Full Backward for stage 1, microbatch "
                             "0 without first running Forward\n\nFull pipeline schedule: ...")

    monkeypatch.setattr(pipeline_run, "_validate_schedule", refuse)
    stages = (Stage(0, 3, (0,)), Stage(3, 6, (1,)))
    plan = PipelinePlan("gpipe", stages, gpipe_orders(stages, 2, 2), 2)
    path = tmp_path / "plan.json"
    save_plan(pipeline_run.saved_for_model(plan, load_model("gpt-tiny"), 2, ("a", "b")), path)
    code, _, err = run_cli("run", "pipeline", str(path))
    assert code == 2, err
    assert _errors(err) == [f"error: {path}: torch.distributed.pipelining refuses the gpipe "
                           "schedule: Rank 1, step 0: Running Full Backward for stage 1, "
                           "microbatch 0 without first running Forward"]
