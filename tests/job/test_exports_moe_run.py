"""The MoE run settings in the exports (``job.exports.framework_flags``): the token dispatcher,
the EP All-to-All overlap and the CUDA graph scope as Megatron-LM (d98e8a6) spells them,
refused where Megatron-Core or TorchTitan cannot run them, and ``dlsched plan
--moe-a2a-overlap`` refused where the evaluator refuses it."""

from __future__ import annotations

import json
import shlex

import pytest

from dlsched.errors import ConfigError
from dlsched.job.execution import Execution
from dlsched.job.exports.writers import megatron_args, torchtitan_toml
from dlsched.job.model_spec import bundled_specs

MIXTRAL = bundled_specs()["mixtral-8x7b"]
LLAMA8 = bundled_specs()["llama3-8b"]
# TP2 EP8 DP32 on 64 GPUs, 1F1B without a pipeline: a layout the EP overlap runs on
MOE = Execution(2, 1, 32, 1, 256, ep=8, sequence_parallel=True, zero=1)
DENSE = Execution(1, 1, 8, 1, 8)


def args_of(spec, layout: Execution) -> list[str]:
    """The argument line of ``megatron_args`` (its last line), split."""
    return shlex.split(megatron_args(spec, layout).splitlines()[-1])


def value(args: list[str], flag: str, count: int = 1) -> list[str]:
    """The ``count`` values after ``flag``; the flag given once."""
    assert args.count(flag) == 1, flag
    at = args.index(flag)
    return args[at + 1:at + 1 + count]


@pytest.mark.parametrize(("dispatcher", "expected"), [
    ("alltoall", ["alltoall"]), ("deepep", ["flex", "deepep"]),
    ("hybridep", ["flex", "hybridep"])])
def test_each_dispatcher_is_written(dispatcher, expected):
    args = args_of(MIXTRAL, MOE.with_run(moe_dispatcher=dispatcher))
    assert value(args, "--moe-token-dispatcher-type") == expected[:1]
    if dispatcher == "alltoall":
        assert "--moe-flex-dispatcher-backend" not in args
    else:
        assert value(args, "--moe-flex-dispatcher-backend") == expected[1:]
    assert "--moe-enable-deepep" not in args  # deprecated at d98e8a6


def test_a2a_overlap_writes_both_switches_only_when_asked():
    on = args_of(MIXTRAL, MOE.with_run(moe_a2a_overlap=True))
    off = args_of(MIXTRAL, MOE)
    assert "--overlap-moe-expert-parallel-comm" in on and "--delay-wgrad-compute" in on
    assert "--overlap-moe-expert-parallel-comm" not in off and "--delay-wgrad-compute" not in off
    assert len(on) == len(off) + 2


@pytest.mark.parametrize(("layout", "spec", "field"), [
    (MOE.with_run(moe_a2a_overlap=True, precision="autocast"), MIXTRAL,
     "moe_a2a_overlap: .*bf16 or fp16"),
    (Execution(2, 1, 32, 1, 256, ep=1, sequence_parallel=True).with_run(moe_a2a_overlap=True),
     MIXTRAL, "moe_a2a_overlap: needs expert parallelism"),
    (Execution(2, 2, 16, 1, 256, ep=8, sequence_parallel=True, schedule="1f1b")
     .with_run(moe_a2a_overlap=True), MIXTRAL, "moe_a2a_overlap: runs on 1F1B"),
    (Execution(2, 1, 32, 1, 256, ep=8, sequence_parallel=True, recompute="full")
     .with_run(moe_a2a_overlap=True), MIXTRAL, "moe_a2a_overlap: .*full"),
    (MOE.with_run(moe_a2a_overlap=True), MIXTRAL.replace(mtp_layers=2),
     "moe_a2a_overlap: .*at most one MTP layer"),
    (DENSE.with_run(moe_a2a_overlap=True), LLAMA8, "moe_a2a_overlap: needs expert")])
def test_a2a_overlap_refused_where_megatron_core_refuses_it(layout, spec, field):
    """Named by the field (``ConfigError.field``; dlsched plan says --moe-a2a-overlap)."""
    with pytest.raises(ConfigError, match=f"^{field}") as refused:
        megatron_args(spec, layout)
    assert refused.value.field == "moe_a2a_overlap"


@pytest.mark.parametrize(("scope", "impl", "modules"), [
    ("moe", "transformer_engine", ["moe_router", "moe_preprocess"]),
    ("attn+moe", "transformer_engine", ["attn", "moe_router", "moe_preprocess"]),
    ("full", "full_iteration", [])])
def test_each_cuda_graph_scope_is_written(scope, impl, modules):
    args = args_of(MIXTRAL, MOE.with_run(cuda_graph=scope))
    assert value(args, "--cuda-graph-impl") == [impl]
    if modules:
        at = args.index("--cuda-graph-modules")
        assert args[at + 1:at + 1 + len(modules)] == modules
        following = args[at + 1 + len(modules):]
        assert not following or following[0].startswith("--")
    else:  # validate_args: no modules with full_iteration, and no NaN check
        assert "--cuda-graph-modules" not in args
        assert "--no-check-for-nan-in-loss-and-grad" in args
    assert "--cuda-graph-scope" not in args and "--enable-cuda-graph" not in args


def test_no_cuda_graph_writes_nothing():
    args = args_of(MIXTRAL, MOE)
    assert not [a for a in args if "cuda-graph" in a]


@pytest.mark.parametrize(("run", "field"), [
    ({"moe_dispatcher": "deepep"}, "moe_dispatcher: deepep"),
    ({"moe_dispatcher": "hybridep"}, "moe_dispatcher: hybridep"),
    ({"moe_a2a_overlap": True}, "moe_a2a_overlap"),
    ({"cuda_graph": "moe"}, "cuda_graph: moe"),
    ({"cuda_graph": "attn+moe"}, r"cuda_graph: attn\+moe"),
    ({"cuda_graph": "full"}, "cuda_graph: full")])
def test_torchtitan_refuses_each_megatron_core_setting(run, field):
    with pytest.raises(ConfigError, match=f"^{field}.*no TorchTitan equivalent") as error:
        torchtitan_toml(LLAMA8, DENSE.with_run(**run))
    assert "\n" not in str(error.value) and error.value.field == next(iter(run))
    torchtitan_toml(LLAMA8, DENSE)  # the defaults export


PLAN = ["plan", "--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "64",
        "--global-batch", "256", "--tp", "2", "--pp", "1", "--dp", "32", "--ep", "8",
        "--microbatch-size", "1", "--recompute", "selective", "--sequence-parallel",
        "--zero", "1", "--schedule", "1f1b"]


def test_plan_json_carries_the_moe_run_settings(run_cli):
    code, out, err = run_cli(*PLAN, "--moe-a2a-overlap", "--moe-dispatcher", "hybridep",
                             "--cuda-graph", "moe", "--json", "--megatron-args")
    assert code == 0, err
    args = json.loads(out)["megatron_args"]["args"]
    assert value(args, "--moe-flex-dispatcher-backend") == ["hybridep"]
    assert "--overlap-moe-expert-parallel-comm" in args and "--delay-wgrad-compute" in args
    assert value(args, "--cuda-graph-modules", 2) == ["moe_router", "moe_preprocess"]


@pytest.mark.parametrize(("change", "phrase"), [
    (["--model", "llama3-8b", "--ep", "1"], "--moe-a2a-overlap: on llama3-8b, a dense model"),
    (["--ep", "1"], "--moe-a2a-overlap: needs expert parallelism"),
    (["--recompute", "full"], "--moe-a2a-overlap: Megatron-Core disables full"),
    (["--pp", "2", "--dp", "16"], "--moe-a2a-overlap: runs on 1F1B")])
def test_plan_refuses_the_overlap_where_the_evaluator_does(run_cli, change, phrase):
    given = list(PLAN)
    for flag, new in zip(change[::2], change[1::2], strict=True):
        given[given.index(flag) + 1] = new
    code, out, err = run_cli(*given, "--moe-a2a-overlap")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert phrase in err
