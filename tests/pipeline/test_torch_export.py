"""Plan files and torch action tables: round trips, refusals, CLI (no torch needed)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from pipeline_cases import uniform_problem

from dlsched.errors import ConfigError
from dlsched.hardware.device_graph import server_graph
from dlsched.pipeline import (
    PLANNERS,
    PipelinePlan,
    PipelineProblem,
    Stage,
    parse_orders,
    run_planner,
    simulate,
    synthetic_chain,
)
from dlsched.pipeline.plans.plan_file import load_plan, save_plan, saved_from_result
from dlsched.pipeline.plans.schedules import backward_first_dispatch, one_f_one_b_orders
from dlsched.pipeline.plans.torch_export import (
    read_torch_export,
    to_plan,
    to_torch,
    write_torch_export,
)
from dlsched.pipeline.simulation.simulate import list_schedule
from dlsched.runtime.pipeline.replay import retimed_chain

KINDS = ("gpipe", "1f1b", "interleaved", "zb-h1")


def _plans() -> list[PipelinePlan]:
    # 8 blocks of 4 s (F 1 s, B 2 s) on 4 GPUs, each with 10 GB of gradients: all-reduces
    # make every data-parallel configuration slower, so the baselines pick pure pipelines.
    chain = synthetic_chain([1.0] * 8, [2.0] * 8, [0.0] * 8, [1e10] * 8, split=True)
    graph = server_graph("uniform", [(4, 1e12, 2**40, 1e9, 0.0)], 1e9, 0.0)
    problem = PipelineProblem(chain, graph, 8, ("none",))
    plans = [run_planner(problem, name).plan for name in KINDS]
    stages = tuple(Stage(2 * s, 2 * s + 2, (3 - s,)) for s in range(4))
    plans.append(list_schedule(problem, stages, backward_first_dispatch(4, (4,) * 4, True),
                               "dlsched").plan)
    return plans


@pytest.mark.parametrize("plan", _plans(), ids=[*KINDS, "list-reversed-gpus"])
def test_exported_table_loads_back_into_the_same_plan(plan: PipelinePlan,
                                                      tmp_path: Path) -> None:
    """Every schedule kind: plan -> CSV + mapping -> plan is the identity; rows are the used
    GPUs in index order and each cell is the action's text."""
    schedule = to_torch(plan)
    names = tuple(f"g{k}" for k in range(len(plan.orders)))
    mapping = write_torch_export(schedule, names, tmp_path / "order.csv")
    assert mapping == tmp_path / "order.stages.json"
    back = read_torch_export(tmp_path / "order.csv")
    assert back == schedule and to_plan(back) == plan
    rows = (tmp_path / "order.csv").read_text().splitlines()
    assert rows[0].split(",") == [str(a) for a in plan.orders[schedule.rank_devices[0]]]


def test_interleaved_and_split_plans_keep_their_shape() -> None:
    """Interleaved: 2p stages on p ranks, rank k holds k and k+p; ZB-H1 keeps I and W."""
    interleaved, zb = (p for p in _plans() if p.planner in ("interleaved", "zb-h1"))
    schedule = to_torch(interleaved)
    p = schedule.world_size
    assert p >= 2 and len(schedule.stage_ranks) == 2 * p
    assert all(schedule.stages_of(k) == [k, k + p] for k in range(p))
    kinds = {a.kind for row in to_torch(zb).rows for a in row}
    assert kinds == {"F", "I", "W"}


def test_unused_gpus_and_reversed_mapping() -> None:
    """Stages on GPUs 3,2,1,0: rank r is GPU r, stage s is on rank 3 - s."""
    plan = _plans()[-1]
    schedule = to_torch(plan)
    assert schedule.rank_devices == (0, 1, 2, 3) and schedule.stage_ranks == (3, 2, 1, 0)


def test_replicated_stage_is_refused() -> None:
    """torch runs one rank per stage: a replicated stage is a ConfigError naming it."""
    plan = PipelinePlan("x", (Stage(0, 2, (0, 1)),), ((), ()), 2)
    with pytest.raises(ConfigError, match=r"stage 0 is replicated on GPUs \[0, 1\]"):
        to_torch(plan)


def test_tampered_table_is_refused(tmp_path: Path) -> None:
    """A table whose action sits on the wrong rank fails dlsched's plan validator."""
    plan = _plans()[1]
    write_torch_export(to_torch(plan), ("a", "b", "c", "d"), tmp_path / "t.csv")
    rows = (tmp_path / "t.csv").read_text().splitlines()
    rows[0], rows[1] = rows[1], rows[0]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(ConfigError, match="not this GPU's work"):
        read_torch_export(tmp_path / "t.csv")


@pytest.mark.parametrize("split", [False, True])
def test_plan_file_round_trip(tmp_path: Path, split: bool) -> None:
    """save_plan then load_plan gives the same plan, blocks and prediction, including
    replicated stages that split their microbatches."""
    problem = uniform_problem(3, 4, act=1e6)
    stages = (Stage(0, 2, (0, 1), split), Stage(2, 3, (2,)))
    plan = PipelinePlan("x", stages, one_f_one_b_orders(stages, 3, 4), 4)
    result = run_planner(problem, "x", lambda _: plan)
    saved = saved_from_result(result, 2)
    save_plan(saved, tmp_path / "plan.json")
    assert load_plan(tmp_path / "plan.json") == saved
    assert load_plan(tmp_path / "plan.json").plan.stages[0].split is split


def test_plan_file_with_bad_order_names_the_field(tmp_path: Path) -> None:
    """An unparsable action is refused with the field and the value."""
    saved = saved_from_result(run_planner(uniform_problem(2, 2), "gpipe"), 1)
    save_plan(saved, tmp_path / "plan.json")
    document = json.loads((tmp_path / "plan.json").read_text())
    document["orders"][0] = "0F0 0X1"
    (tmp_path / "plan.json").write_text(json.dumps(document))
    with pytest.raises(ConfigError, match=r"orders: gpu0: action: '0X1'"):
        load_plan(tmp_path / "plan.json")


def test_cli_plan_save_then_export(run_cli, tmp_path: Path) -> None:
    """``plan --save`` writes a loadable plan; ``export --torch-csv`` writes table + mapping;
    a replicated plan exits 2 with the reason."""
    chain = tmp_path / "chain.yaml"
    chain.write_text("name: c\nblocks:\n" + "".join(  # all-reduces dominate: pure pipeline
        f"  - {{name: b{i}, forward_flops: 1e9, activation: 1 MB, params: 2 GB}}\n"
        for i in range(8)))
    plan = tmp_path / "plan.json"
    code, _, err = run_cli("pipeline", "plan", "--model", str(chain), "--devices",
                           "1x8-NVLink", "--microbatches", "4", "--planner", "1f1b",
                           "--save", str(plan))
    assert code == 0, err
    table = tmp_path / "out" / "order.csv"
    code, out, err = run_cli("pipeline", "export", str(plan), "--torch-csv", str(table))
    assert code == 0, err
    assert "order.stages.json" in out
    assert to_plan(read_torch_export(table)) == load_plan(plan).plan
    replicated = replace(saved_from_result(run_planner(uniform_problem(2, 2), "gpipe"), 1),
                         plan=PipelinePlan("x", (Stage(0, 2, (0, 1)),),
                                           parse_orders("g0: 0F0 0B0\ng1: 0F1 0B1"), 2))
    save_plan(replicated, plan)
    code, _, err = run_cli("pipeline", "export", str(plan), "--torch-csv", str(table))
    assert code == 2 and "replicated" in err


def test_without_replication_every_planner_has_one_gpu_per_stage() -> None:
    """On fast links the free dlsched plan and the grid baselines replicate; without
    replication every planner's plan has one GPU per stage (so torch can run it) and dlsched
    is never slower than any of them."""
    problem = uniform_problem(4, 8, f=1.0, b=2.0, act=1e3, split=True)
    assert any(len(s.devices) > 1 for s in run_planner(problem, "dlsched").plan.stages)
    assert any(len(s.devices) > 1 for s in run_planner(problem, "gpipe").plan.stages)
    pure = replace(problem, replicate=False)
    ours = run_planner(pure, "dlsched")
    for name in PLANNERS:
        if name == "dualpipe":  # two copies of every stage, one per direction
            with pytest.raises(ConfigError, match="replicate is off"):
                run_planner(pure, name)
            continue
        result = run_planner(pure, name)
        assert all(len(s.devices) == 1 for s in result.plan.stages), name
        to_torch(result.plan)
        assert ours.sim.iteration_s <= result.sim.iteration_s * (1 + 1e-12), name


@pytest.mark.parametrize("name", KINDS)
def test_retimed_chain_replays_its_own_timeline(name: str) -> None:
    """Re-timing a chain from a plan's simulated timeline and simulating again gives the same
    iteration time (stage sums and the I/W share are recovered exactly)."""
    problem = uniform_problem(3, 6, f=1.0, b=3.0, act=1e8, split=True)
    result = run_planner(problem, name)
    chain = retimed_chain(problem.chain, result.plan, result.sim.timeline)
    again = simulate(PipelineProblem(chain, problem.graph, 6), result.plan)
    assert again.iteration_s == pytest.approx(result.sim.iteration_s, rel=1e-9)
