"""dlsched pipeline plans on torch.distributed.pipelining: same gradients as unpipelined
training for every schedule kind, torch's own validator agrees with the export, mismatched
models are refused before any process starts, and a dying rank ends the run."""

from __future__ import annotations

import importlib
import os
import time

import pytest

torch = pytest.importorskip("torch", reason="optional torch extra not installed")

import torch.distributed as dist  # noqa: E402
from torch.distributed.pipelining.schedules import _Action, _validate_schedule  # noqa: E402

from dlsched.errors import ConfigError  # noqa: E402
from dlsched.hardware.device_graph import server_graph  # noqa: E402
from dlsched.pipeline import PipelinePlan, PipelineProblem, Stage, synthetic_chain  # noqa: E402
from dlsched.pipeline.plans.schedules import (  # noqa: E402
    backward_first_dispatch,
    critical_path_dispatch,
    gpipe_orders,
    interleaved_orders,
    one_f_one_b_orders,
    zb_h1_orders,
)
from dlsched.pipeline.plans.torch_export import to_torch  # noqa: E402
from dlsched.pipeline.simulation.simulate import list_schedule  # noqa: E402
from dlsched.runtime.pipeline import run as pipeline_run  # noqa: E402
from dlsched.runtime.pipeline.model import PipelineModel, load_model  # noqa: E402
from dlsched.runtime.pipeline.run import (  # noqa: E402
    PipelineRun,
    reference_gradients,
    run_pipeline,
    run_pipelines,
    saved_for_model,
)
from dlsched.runtime.spawn import RankFailure, SpawnOptions  # noqa: E402

MODEL = "gpt-tiny"  # 6 blocks: embed, layer0..3, head
MICROBATCHES, MICROBATCH_SIZE = 4, 2
NAMES = ("cpu0", "cpu1")
OPTIONS = SpawnOptions(timeout_s=120, deadline_s=480, grace_s=10)


def _plans() -> list[PipelinePlan]:
    """Every schedule kind on 2 ranks over gpt-tiny's 6 blocks."""
    two = (Stage(0, 3, (0,)), Stage(3, 6, (1,)))
    m = MICROBATCHES
    four = (Stage(0, 2, (0,)), Stage(2, 3, (1,)), Stage(3, 4, (0,)), Stage(4, 6, (1,)))
    problem = PipelineProblem(synthetic_chain([1.0] * 6, [2.0] * 6, [1e3] * 6, split=True),
                              server_graph("two", [(2, 1e12, 2**40, 1e9, 0.0)], 1e9, 0.0), m)
    remaining = [(6.0 - 3 * s, 6.0 - 3 * s) for s in range(2)]
    return [PipelinePlan("gpipe", two, gpipe_orders(two, 2, m), m),
            PipelinePlan("1f1b", two, one_f_one_b_orders(two, 2, m), m),
            PipelinePlan("interleaved", four, interleaved_orders(2, m, ((0,), (1,)), 2), m),
            PipelinePlan("zb-h1", two, zb_h1_orders(two, 2, m), m),
            list_schedule(problem, two, backward_first_dispatch(2, (m, m), True),
                          "dlsched-bwd-first-split").plan,
            list_schedule(problem, two, critical_path_dispatch(remaining, (2, 1), False),
                          "dlsched-critical-path").plan]


def test_torch_validator_infers_our_stage_to_rank_mapping() -> None:
    """torch's own ``_validate_schedule`` accepts every exported table and infers the same
    stage-to-rank mapping we write."""
    for plan in _plans():
        schedule = to_torch(plan)
        actions = {r: [_Action.from_str(cell) for cell in row.split(",")]
                   for r, row in enumerate(schedule.csv_text().splitlines())}
        mapping = _validate_schedule(actions, schedule.world_size, len(schedule.stage_blocks),
                                     plan.num_microbatches)
        assert mapping == dict(enumerate(schedule.stage_ranks)), plan.planner


def test_every_schedule_kind_gives_the_unpipelined_gradients() -> None:
    """One pipelined step per schedule kind (GPipe, 1F1B, interleaved, ZB-H1 with split
    backward, two dlsched list-scheduled orders) gives the gradients of the same model trained
    without pipelining on the same batch; the measured timeline has every action once."""
    model = load_model(MODEL)
    plans = _plans()
    saved = [saved_for_model(plan, model, MICROBATCH_SIZE, NAMES) for plan in plans]
    runs = run_pipelines(saved, MODEL, iterations=1, warmup=0, keep_gradients=True,
                         options=OPTIONS)
    inputs, targets = model.make_batch(MICROBATCHES * MICROBATCH_SIZE, 0)
    expected = reference_gradients(load_model(MODEL), inputs, targets)
    for plan, result in zip(plans, runs, strict=True):
        assert result.gradients.keys() == expected.keys(), plan.planner
        for name, grad in expected.items():
            torch.testing.assert_close(result.gradients[name], grad, rtol=1e-4, atol=1e-6,
                                       msg=lambda m, p=plan, n=name: f"{p.planner} {n}: {m}")
        labels = sorted(s.label for s in result.timeline.spans)
        assert labels == sorted(str(a) for order in plan.orders for a in order), plan.planner
        assert {s.resource for s in result.timeline.spans} == set(NAMES)
        assert len(result.iteration_s) == 1 and result.iteration_s[0] > 0


def test_plan_for_another_model_is_refused_before_any_process(monkeypatch) -> None:
    """Wrong block count, or a plan made for another microbatch size, is a ConfigError
    raised before spawning (spawn is replaced by a function that fails the test)."""
    def no_spawn(*args: object, **kwargs: object) -> None:
        raise AssertionError("a process was started")

    monkeypatch.setattr(pipeline_run, "spawn", no_spawn)
    model = load_model(MODEL)
    plan = _plans()[1]
    saved = saved_for_model(plan, model, MICROBATCH_SIZE, NAMES)
    short = PipelinePlan("1f1b", (Stage(0, 3, (0,)), Stage(3, 5, (1,))), plan.orders, 4)
    wrong_blocks = saved_for_model(short, model, MICROBATCH_SIZE, NAMES)
    wrong_blocks = type(saved)(**{**vars(wrong_blocks), "block_names": model.block_names[:5],
                                  "activation_bytes": saved.activation_bytes[:5],
                                  "param_bytes": saved.param_bytes[:5]})
    with pytest.raises(ConfigError, match=r"model: gpt-tiny has 6 blocks .* cuts 5 blocks"):
        run_pipeline(wrong_blocks, MODEL, iterations=1)
    other_size = type(saved)(**{**vars(saved), "microbatch_size": MICROBATCH_SIZE + 1})
    with pytest.raises(ConfigError, match=r"block embed outputs .* another --microbatch-size"):
        run_pipeline(other_size, MODEL, iterations=1)
    with pytest.raises(ConfigError, match="neither a built-in model"):
        run_pipeline(saved, "no-such-model", iterations=1)


class _DieOnRankOne(torch.nn.Module):
    """Identity, except that it kills the process when run on rank 1 of a process group."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if dist.is_initialized() and dist.get_rank() == 1:
            os._exit(7)
        return x


def dying_gpt(seed: int) -> PipelineModel:
    """gpt-tiny whose head dies on rank 1 (used by the dead-rank test, by import path)."""
    model = load_model(MODEL, seed)
    model.blocks.head = torch.nn.Sequential(model.blocks.head, _DieOnRankOne())
    return model


def test_a_dying_rank_ends_the_run_with_an_error() -> None:
    """Rank 1 exits in its first forward while rank 0 waits for its gradient: the run ends
    with RankFailure naming rank 1, within the deadline (no hang)."""
    model = dying_gpt(0)
    saved = saved_for_model(_plans()[1], model, MICROBATCH_SIZE, NAMES)
    saved = type(saved)(**{**vars(saved), "model": f"{__name__}:dying_gpt"})
    start = time.monotonic()
    with pytest.raises(RankFailure, match=r"rank 1 failed \(exit code 7\)"):
        run_pipeline(saved, f"{__name__}:dying_gpt", iterations=1,
                     options=SpawnOptions(timeout_s=30, deadline_s=180, grace_s=3))
    assert time.monotonic() - start < 180


def test_profile_writes_a_chain_the_planner_reads(tmp_path) -> None:
    """The profile's chain file loads as a chain with the model's exact bytes, positive
    times, a stash per block, and an input-gradient share in (0, 1); the calibrated device
    graph document loads as a device graph of CPU ranks."""
    import yaml

    from dlsched.hardware.device_config import load_devices
    from dlsched.pipeline.chains.chain import REFERENCE_FLOPS
    from dlsched.pipeline.chains.model_source import load_chain
    from dlsched.runtime.pipeline.calibrate import (
        RuntimeFit,
        cpu_devices_document,
        measure_runtime,
    )
    from dlsched.runtime.pipeline.profile import chain_document, profile_blocks
    from dlsched.runtime.pipeline.run import block_bytes

    model = load_model(MODEL)
    profiles = profile_blocks(model, MICROBATCH_SIZE, repeats=1, warmup=0)
    path = tmp_path / "chain.yaml"
    path.write_text(yaml.safe_dump(chain_document(MODEL, profiles)))
    chain = load_chain(path, 1)
    activations, params = block_bytes(model, MICROBATCH_SIZE)
    assert chain.block_names == model.block_names
    assert chain.activation_bytes.tolist() == activations
    assert chain.param_bytes.tolist() == params
    assert (chain.forward_flops > 0).all() and (chain.backward_flops > 0).all()
    assert (chain.stash_bytes > 0).all() and 0 < chain.input_grad_fraction < 1
    split = sum(p.backward_input_s + p.backward_weight_s for p in profiles)
    full = sum(p.backward_s for p in profiles)
    # the chain file holds the ratio within its accepted 0.1..10 (a loaded machine once
    # timed the split backward 14.8x the full one on a single repeat)
    assert chain.split_backward_factor == pytest.approx(min(max(split / full, 0.1), 10.0))
    assert profiles[0].backward_input_s == 0.0  # token ids have no gradient
    devices = tmp_path / "cpu.yaml"
    try:  # a plausible calibration, or on a busy machine a refusal saying why
        calibration = measure_runtime(MODEL, MICROBATCH_SIZE, MICROBATCHES, rounds=3,
                                      repeats=1)
        overhead, factor = max(0.0, calibration.overhead_s), calibration.compute_factor
        assert overhead < calibration.action_s and len(calibration.parts) == 3
        assert factor > 0
    except ConfigError as error:
        assert str(error).startswith("runtime calibration: refused after 3 measurements")
        overhead, factor = 1e-3, 1.25
    fit = RuntimeFit(factor, overhead, 0.4e-3)
    devices.write_text(yaml.safe_dump(cpu_devices_document(3, 1e-4, 1e9, 2**30, fit=fit)))
    graph = load_devices(devices)
    assert graph.num_devices == 3
    assert graph.flops == pytest.approx([REFERENCE_FLOPS / factor] * 3, rel=1e-5)
    assert graph.transfer_time(0, 2, 1e9) == pytest.approx(1.0001)
    assert [d.overhead for d in graph.devices] == pytest.approx([overhead] * 3, rel=1e-5)
    assert [d.transfer_overhead for d in graph.devices] == pytest.approx([0.4e-3] * 3)


def test_rank_fit_measured_from_two_ranks() -> None:
    """Two ranks running gpt-tiny as two GPipe stages give a compute factor against the
    chain's profile and a transfer overhead that pass their checks, or on a busy machine a
    refusal saying why; with the per-action overhead set above every gap the transfer cost
    is negative and refused. The chain is profiled with one torch thread, as each rank runs
    (``SpawnOptions.threads``) and as ``profile_chain`` is told to: profiled with the
    process's default threads on a loaded 2-core machine it once came out 68x the ranks'
    time (compute factor 0.015)."""
    import torch

    from dlsched.runtime.pipeline.calibrate import measure_ranks
    from dlsched.runtime.pipeline.profile import microbatch_seconds, profile_blocks

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        profiled = microbatch_seconds(profile_blocks(load_model(MODEL), 1, repeats=3))
    finally:
        torch.set_num_threads(threads)
    try:
        fit = measure_ranks(MODEL, 1, 2, profiled, 0.0, 1e-4, 1e9, microbatches=4,
                            iterations=6)
        assert 0.2 < fit.compute_factor < 20 and len(fit.factor_parts) == 3
        assert -0.2e-3 <= fit.transfer_overhead_s < 0.1
    except ConfigError as error:
        assert str(error).startswith("rank calibration")
    with pytest.raises(ConfigError, match=r"rank calibration: refused after 1 measurements: "
                                          r"transfer overhead -[0-9.]+ ms is negative"):
        measure_ranks(MODEL, 1, 2, profiled, 1.0, 1e-4, 1e9, microbatches=4, iterations=6,
                      attempts=1)


def test_cli_run_refuses_a_plan_for_another_model(run_cli, tmp_path) -> None:
    """``run pipeline`` with a model whose blocks differ from the plan's exits 2 at once."""
    from dlsched.pipeline.plans.plan_file import save_plan

    saved = saved_for_model(_plans()[0], load_model(MODEL), MICROBATCH_SIZE, NAMES)
    save_plan(saved, tmp_path / "plan.json")
    code, _, err = run_cli("run", "pipeline", str(tmp_path / "plan.json"), "--model",
                           "gpt-small")
    assert code == 2 and "has 10 blocks" in err


def test_cli_run_does_not_predict_more_ranks_than_cores(run_cli, tmp_path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine with fewer usable cores than the plan's ranks, ``run pipeline`` measures
    but prints no prediction and no error (the simulator's devices run in parallel), and
    says why."""
    import json

    from dlsched.pipeline.plans.plan_file import save_plan
    spawn_module = importlib.import_module("dlsched.runtime.spawn")

    save_plan(saved_for_model(_plans()[0], load_model(MODEL), MICROBATCH_SIZE, NAMES, 1.0),
              tmp_path / "plan.json")
    monkeypatch.setattr(spawn_module, "usable_cores", lambda: 1)
    code, out, err = run_cli("run", "pipeline", str(tmp_path / "plan.json"), "--iterations",
                             "1", "--warmup", "0", "--json")
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    assert row["ranks"] == 2 and row["predicted_s"] is None and row["error"] is None
    assert row["measured_median_s"] > 0
    code, out, err = run_cli("run", "pipeline", str(tmp_path / "plan.json"), "--iterations",
                             "1", "--warmup", "0")
    assert code == 0, err
    assert "2 ranks share 1 usable cores: no prediction" in " ".join(out.split())


def test_cli_export_then_run_writes_trace_and_plot(run_cli, tmp_path) -> None:
    """``pipeline export`` then ``run pipeline --torch-csv``: a JSON row with the measured
    iteration beside the plan's prediction, a Chrome trace with every action, a PNG."""
    import json

    from dlsched.pipeline.plans.plan_file import save_plan

    plan = _plans()[3]
    save_plan(saved_for_model(plan, load_model(MODEL), MICROBATCH_SIZE, NAMES, 1.0),
              tmp_path / "plan.json")
    code, _, err = run_cli("pipeline", "export", str(tmp_path / "plan.json"), "--torch-csv",
                           str(tmp_path / "order.csv"))
    assert code == 0, err
    code, out, err = run_cli("run", "pipeline", str(tmp_path / "plan.json"), "--torch-csv",
                             str(tmp_path / "order.csv"), "--iterations", "1", "--warmup", "0",
                             "--trace", str(tmp_path / "t.json"), "--plot",
                             str(tmp_path / "p.png"), "--json")
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    assert row["planner"] == "zb-h1" and row["predicted_s"] == 1.0
    assert row["measured_median_s"] > 0 and row["error"] == 1.0 / row["measured_median_s"] - 1
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    labels = sorted(e["name"] for e in events if e.get("ph") == "X")
    assert labels == sorted(str(a) for order in plan.orders for a in order)
    assert (tmp_path / "p.png").stat().st_size > 0


def test_runs_pooled_keep_every_iteration_in_order() -> None:
    """Two runs of 2 and 1 iterations pool into one of 3: spans, times and losses in order,
    the second run's iteration 0 numbered 2 (a per-iteration sum must not add the runs' first
    iterations together), median of 0.1, 0.3, 0.2 s = 0.2 s; no runs is an error."""
    from dlsched.sim import Span, Timeline

    def run(times: tuple[float, ...]) -> PipelineRun:
        spans = [Span("rank0", 0.0, t, "forward", "", args={"stage": 0, "microbatch": 0,
                                                              "iteration": i})
                 for i, t in enumerate(times)]
        return PipelineRun(Timeline(spans), times, tuple(t * 10 for t in times), None)

    pooled = PipelineRun.pooled([run((0.1, 0.3)), run((0.2,))])
    assert pooled.iteration_s == (0.1, 0.3, 0.2) and pooled.losses == (1.0, 3.0, 2.0)
    assert [span.end for span in pooled.timeline.spans] == [0.1, 0.3, 0.2]
    assert [span.args["iteration"] for span in pooled.timeline.spans] == [0, 1, 2]
    assert pooled.median_iteration_s == 0.2 and pooled.gradients is None
    with pytest.raises(ConfigError, match="at least one run"):
        PipelineRun.pooled([])
