"""TorchTitan configs in and out (``job.exports.torchtitan_config``,
``job.exports.framework_flags``): FP8, compile and async TP spelled as each framework spells
them; a TorchTitan TOML read into the plan's fields; a plan written as TOML and read back
prices the same."""

from __future__ import annotations

import tomllib

import pytest

from dlsched.errors import ConfigError
from dlsched.job.exports.framework_flags import megatron_fp8_args, titan_run_sections
from dlsched.job.exports.torchtitan_config import plan_fields, read_torchtitan_toml
from dlsched.job.scenario import PlanScenario

BASE = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 8, "global_batch": 16, "tp": 1,
        "pp": 1, "zero": 3, "microbatch_size": 2, "recompute": "selective-op",
        "baselines": False}


@pytest.mark.parametrize(("recipe", "expected"), [
    ("delayed", ["--fp8-format", "hybrid", "--fp8-recipe", "delayed",
                 "--fp8-amax-history-len", "1024", "--fp8-amax-compute-algo", "max"]),
    ("current", ["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"]),
    ("mxfp8", ["--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"]),
    ("tensorwise", ["--fp8-format", "hybrid", "--fp8-recipe", "tensorwise"]),
    (None, []),
])
def test_megatron_fp8_arguments(recipe, expected) -> None:
    notes: list[str] = []
    assert megatron_fp8_args(recipe, notes) == expected
    assert bool(notes) == (recipe == "tensorwise")


def test_torchtitan_sections_by_recipe() -> None:
    notes: list[str] = []
    run = titan_run_sections("rowwise", False, True, True, notes)
    assert run["model"] == {"converters": ["quantize.linear.float8"]}
    assert run["quantize.linear.float8"]["recipe_name"] == "rowwise"
    assert run["quantize.linear.float8"]["filter_fqns"] == ["output"]
    assert run["compile"]["enable"] and run["parallelism"]["enable_async_tensor_parallel"]
    gw_hp = titan_run_sections("rowwise_with_gw_hp", False, True, False, notes)
    assert gw_hp["quantize.linear.float8"]["recipe_name"] == "rowwise_with_gw_hp"
    mx = titan_run_sections("mxfp8", False, False, False, notes)
    assert mx["model"]["converters"] == ["quantize.linear.mx"] and not notes
    titan_run_sections("delayed", False, False, False, notes)
    assert "no TorchTitan recipe" in notes[0]


def test_a_torchtitan_config_read_by_hand(tmp_path) -> None:
    path = tmp_path / "llama3_70b.toml"
    path.write_text("""
[model]
name = "llama3"
flavor = "70B"
converters = ["quantize.linear.float8"]
[training]
local_batch_size = 16
seq_len = 8192
[parallelism]
data_parallel_shard_degree = 32
tensor_parallel_degree = 8
enable_async_tensor_parallel = true
[activation_checkpoint]
mode = "full"
[quantize.linear.float8]
enable_fsdp_float8_all_gather = true
[compile]
enable = true
""")
    fields = plan_fields(read_torchtitan_toml(path))
    assert fields == {"attention": "flash", "model": "llama3-70b", "seq": 8192, "tp": 8,
                      "pp": 1, "cp": 1, "sequence_parallel": True, "dp": 32, "zero": 3,
                      "sharding": "fsdp2-split", "microbatch_size": 16, "global_batch": 512,
                      "recompute": "full",
                      "compile": True, "async_tp": True, "precision": "fp8",
                      "fp8_recipe": "tensorwise", "fp8_all_gather": True}


@pytest.mark.parametrize(("text", "key"), [
    ('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "2"',
     "selective_ac_option"),
    ('[model]\nflavor = "debugmodel"', "model.flavor"),
    ("[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 4",
     "data_parallel_replicate_degree"),
    ('[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = "ZBVZeroBubble"',
     "pipeline_parallel_schedule"),
    ("not = [toml", "not TOML"),
    ('[parallelism]\npipeline_parallel_degree = 2\nfsdp_reshard_after_forward = "always"',
     "fsdp_reshard_after_forward: 'always' with pipeline_parallel_degree 2"),
])
def test_refused_naming_the_key(tmp_path, text: str, key: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=key):
        plan_fields(read_torchtitan_toml(path))


def test_plan_written_as_toml_and_read_back_prices_the_same(tmp_path) -> None:
    fields = {**BASE, "precision": "fp8", "fp8_recipe": "tensorwise", "fp8_all_gather": True,
              "compile": True, "sharding": "fsdp2-split"}  # TorchTitan runs FSDP2
    report = PlanScenario(**fields).run()
    path = tmp_path / "plan.toml"
    path.write_text(report.torchtitan_toml())
    doc = tomllib.loads(path.read_text())
    assert doc["quantize"]["linear"]["float8"]["enable_fsdp_float8_all_gather"] is True
    assert doc["compile"]["enable"] is True
    again = PlanScenario(**{**BASE, **plan_fields(read_torchtitan_toml(path))}).run()
    assert again.rows[0]["iteration_s"] == pytest.approx(report.rows[0]["iteration_s"])
    assert again.rows[0]["layout"] == report.rows[0]["layout"]
    named = PlanScenario(**{**BASE, "tp": None, "zero": None}, from_torchtitan=str(path)).run()
    assert named.rows[0]["iteration_s"] == pytest.approx(report.rows[0]["iteration_s"])
