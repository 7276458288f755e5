"""A plan handed to Megatron-LM (arguments parsed back with shlex) and TorchTitan (TOML parsed
with tomllib): every layout feature lands on its option, and a plan without an equivalent says
so."""

from __future__ import annotations

import shlex
import tomllib
from dataclasses import replace

import pytest

from dlsched.errors import ConfigError
from dlsched.job.execution import Execution
from dlsched.job.exports.writers import megatron_args, torchtitan_toml
from dlsched.job.model_spec import Model, bundled_specs

GPT3 = bundled_specs()["gpt3-175b"]
LLAMA70 = bundled_specs()["llama3-70b"]
# Korthikanti et al. Table 5's 175B row: TP8 PP8, 3 chunks (96 / 24 = 4 layers each), SP,
# selective recomputation, microbatch 1, global batch 64
TABLE5 = Execution(8, 8, 1, 1, 64, chunks=3, schedule="interleaved", recompute="selective",
                sequence_parallel=True)


def parse(text: str) -> tuple[dict[str, list[str]], list[str]]:
    """Options and their values (flags: empty list), and the comment lines."""
    comments = [line for line in text.splitlines() if line.startswith("#")]
    options: dict[str, list[str]] = {}
    for token in shlex.split(text, comments=True):
        if token.startswith("--"):
            assert token not in options, f"{token} given twice"
            options[token] = []
            last = token
        else:
            options[last].append(token)
    return options, comments


def test_megatron_table5_row():
    options, comments = parse(megatron_args(
        GPT3, TABLE5.with_run(precision="fp16", attention="unfused")))
    assert options == {
        "--num-layers": ["96"], "--hidden-size": ["12288"], "--num-attention-heads": ["96"],
        "--ffn-hidden-size": ["49152"], "--vocab-size": ["51200"], "--seq-length": ["2048"],
        "--max-position-embeddings": ["2048"], "--tensor-model-parallel-size": ["8"],
        "--pipeline-model-parallel-size": ["8"], "--num-layers-per-virtual-pipeline-stage": ["4"],
        "--micro-batch-size": ["1"], "--global-batch-size": ["64"], "--sequence-parallel": [],
        "--recompute-granularity": ["selective"], "--fp16": [],
        "--accumulate-allreduce-grads-in-fp32": [], "--attention-backend": ["unfused"]}
    assert any("64 GPUs" in line for line in comments)


def test_megatron_each_feature():
    gqa = GPT3.replace(kv_heads=8, tied_embeddings=False)
    full = replace(TABLE5, chunks=1, schedule="1f1b", recompute="full", sequence_parallel=False)
    options, _ = parse(megatron_args(gqa, full))
    assert options["--group-query-attention"] == [] and options["--num-query-groups"] == ["8"]
    assert options["--recompute-granularity"] == ["full"]
    assert options["--recompute-method"] == ["uniform"]
    assert options["--recompute-num-layers"] == ["1"]
    assert "--untie-embeddings-and-output-weights" in options and "--bf16" in options
    assert options["--attention-backend"] == ["flash"]  # Megatron-Core's fused kernel
    for absent in ("--sequence-parallel", "--num-layers-per-virtual-pipeline-stage",
                   "--use-distributed-optimizer", "--grad-reduce-in-bf16", "--fp16"):
        assert absent not in options
    bf16_grads, _ = parse(megatron_args(gqa, full.with_run(grad_reduce="bf16")))
    assert "--grad-reduce-in-bf16" in bf16_grads


@pytest.mark.parametrize("zero,expected", [
    (0, {}), (1, {"--use-distributed-optimizer": []}),
    (2, {"--use-megatron-fsdp": [], "--data-parallel-sharding-strategy": ["optim_grads"],
         "--ckpt-format": ["fsdp_dtensor"]}),
    (3, {"--use-megatron-fsdp": [], "--data-parallel-sharding-strategy": ["optim_grads_params"],
         "--ckpt-format": ["fsdp_dtensor"]})])
def test_megatron_zero_stages(zero, expected):
    layout = Execution(8, 16, 8, 1, 1536, zero=zero)
    options, _ = parse(megatron_args(GPT3, layout))
    sharding = {key: value for key, value in options.items()
                if key in ("--use-distributed-optimizer", "--use-megatron-fsdp",
                           "--data-parallel-sharding-strategy", "--ckpt-format")}
    assert sharding == expected


@pytest.mark.parametrize("layout,precision,phrase", [
    (replace(TABLE5, chunks=1, schedule="gpipe"), "bf16", "no GPipe schedule"),
    (replace(TABLE5, global_batch=12), "bf16", "a multiple of pp"),
    (TABLE5, "autocast", "no autocast mode")])
def test_megatron_says_what_has_no_equivalent(layout, precision, phrase):
    options, comments = parse(megatron_args(GPT3, layout.with_run(precision=precision)))
    assert any(phrase in line for line in comments)
    assert options["--num-layers"] == ["96"]  # the arguments still follow the comments
    assert ("--bf16" in options) == (precision == "bf16") and "--fp16" not in options


# Table 5's layout with Llama 3 70B's 80 layers: 2 chunks of 5 layers per rank
TITAN = replace(TABLE5, chunks=2)


def test_torchtitan_table5_row():
    config = tomllib.loads(torchtitan_toml(LLAMA70, TITAN))
    assert config["model"] == {"name": "llama3", "flavor": "70B"}
    assert config["training"] == {"local_batch_size": 64, "global_batch_size": 64,
                                  "seq_len": 8192, "mixed_precision_param": "bfloat16",
                                  "mixed_precision_reduce": "float32"}
    assert config["parallelism"] == {
        "data_parallel_replicate_degree": 1, "data_parallel_shard_degree": 1,
        "tensor_parallel_degree": 8, "pipeline_parallel_degree": 8,
        "pipeline_parallel_schedule": "Interleaved1F1B", "pipeline_parallel_microbatch_size": 1,
        "pipeline_parallel_layers_per_stage": 5, "pipeline_parallel_first_stage_less_layers": 0,
        "pipeline_parallel_last_stage_less_layers": 0, "context_parallel_degree": 1}
    assert config["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}


def titan(layout: Execution, precision: str = "bf16", spec: Model = LLAMA70):
    text = torchtitan_toml(spec, layout.with_run(precision=precision))
    return tomllib.loads(text), [line for line in text.splitlines() if line.startswith("#")]


@pytest.mark.parametrize("zero,replicate,shard,reshard", [
    (0, 8, 1, None), (1, 8, 1, None), (2, 1, 8, "never"), (3, 1, 8, "always")])
def test_torchtitan_data_parallel_without_tp_or_pp(zero, replicate, shard, reshard):
    config, comments = titan(Execution(1, 1, 8, 2, 64, recompute="full", zero=zero))
    parallelism = config["parallelism"]
    assert parallelism["data_parallel_replicate_degree"] == replicate
    assert parallelism["data_parallel_shard_degree"] == shard
    assert parallelism.get("fsdp_reshard_after_forward") == reshard
    assert "pipeline_parallel_schedule" not in parallelism
    assert config["training"]["local_batch_size"] == 2  # 4 accumulation steps of 2 x 8
    assert config["activation_checkpoint"] == {"mode": "full"}
    assert any("no optimizer-only sharding" in line for line in comments) == (zero == 1)


def test_torchtitan_ddp_with_tp_becomes_fsdp_and_says_so():
    config, comments = titan(Execution(8, 16, 8, 1, 1536, sequence_parallel=True))
    assert config["parallelism"]["data_parallel_shard_degree"] == 8
    assert config["parallelism"]["fsdp_reshard_after_forward"] == "never"
    assert config["training"]["local_batch_size"] == 192  # 192 microbatches of 1 per replica
    assert any("DDP runs only without TP and PP" in line for line in comments)


@pytest.mark.parametrize("layout,precision,phrase", [
    (replace(TITAN, sequence_parallel=False), "bf16", "TP without sequence parallelism"),
    (TITAN, "fp16", "no FP16 in TorchTitan")])
def test_torchtitan_says_what_has_no_equivalent(layout, precision, phrase):
    config, comments = titan(layout, precision)
    assert any(phrase in line for line in comments)
    assert config["parallelism"]["pipeline_parallel_schedule"] in ("1F1B", "Interleaved1F1B")


def test_torchtitan_schedules_and_precision():
    gpipe, _ = titan(replace(TITAN, chunks=1, schedule="gpipe"), "autocast")
    assert gpipe["parallelism"]["pipeline_parallel_schedule"] == "GPipe"
    assert gpipe["parallelism"]["pipeline_parallel_layers_per_stage"] == 10
    assert gpipe["training"]["mixed_precision_param"] == "bfloat16"  # no pure-FP32 export
    assert gpipe["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}
    plain, _ = titan(replace(TITAN, chunks=1, schedule="1f1b", recompute="none"))
    assert plain["parallelism"]["pipeline_parallel_schedule"] == "1F1B"
    assert plain["activation_checkpoint"] == {"mode": "none"}


def test_exports_refuse_bad_input():
    with pytest.raises(ConfigError, match=r"^precision: "):  # int8, or an FP32 export:
        megatron_args(GPT3, TABLE5.with_run(precision="int8"))  # no priced precision
    with pytest.raises(ConfigError, match=r"^precision: 'fp32' is not accepted; accepted: "
                                          r"bf16, fp16, autocast, fp8"):
        torchtitan_toml(LLAMA70, TITAN.with_run(precision="fp32"))
    with pytest.raises(ConfigError, match=r"^pp: "):
        torchtitan_toml(LLAMA70, replace(TITAN, pp=3))


def test_megatron_builds_the_model_the_plan_priced():
    """Llama 3 70B: SwiGLU, RMSNorm, rotary positions, no biases, untied output, 8 query
    groups, its FFN width and vocabulary; Mixtral 8x7B the same and its experts; GPT-3 none of
    the Llama flags (Megatron-LM's defaults are GPT's)."""
    llama, comments = parse(megatron_args(LLAMA70, Execution(8, 4, 2, 1, 64)))
    assert {key: llama[key] for key in (
        "--swiglu", "--normalization", "--position-embedding-type", "--disable-bias-linear",
        "--untie-embeddings-and-output-weights", "--group-query-attention",
        "--num-query-groups", "--ffn-hidden-size", "--vocab-size")} == {
        "--swiglu": [], "--normalization": ["RMSNorm"], "--position-embedding-type": ["rope"],
        "--disable-bias-linear": [], "--untie-embeddings-and-output-weights": [],
        "--group-query-attention": [], "--num-query-groups": ["8"],
        "--ffn-hidden-size": ["28672"], "--vocab-size": ["128256"]}
    assert any("--rotary-base" in line for line in comments)
    mixtral, _ = parse(megatron_args(bundled_specs()["mixtral-8x7b"],
                                     Execution(2, 4, 8, 1, 64, ep=8)))
    assert mixtral["--swiglu"] == [] and mixtral["--normalization"] == ["RMSNorm"]
    assert (mixtral["--num-experts"], mixtral["--moe-router-topk"],
            mixtral["--expert-model-parallel-size"], mixtral["--moe-ffn-hidden-size"]) == (
        ["8"], ["2"], ["8"], ["14336"])
    gpt, _ = parse(megatron_args(GPT3, TABLE5))
    assert not {"--swiglu", "--normalization", "--position-embedding-type",
                "--disable-bias-linear", "--untie-embeddings-and-output-weights"} & set(gpt)


@pytest.mark.parametrize(("export", "spec", "layout", "field"), [
    (megatron_args, GPT3, replace(TABLE5, chunks=1, schedule="zb-h1"), "schedule: zb-h1"),
    (torchtitan_toml, LLAMA70, replace(TITAN, chunks=1, schedule="zb-h1"), "schedule: zb-h1"),
    (megatron_args, LLAMA70, Execution(16, 4, 1, 1, 64), "tp: 16 does not divide"),
    (torchtitan_toml, LLAMA70, Execution(16, 4, 1, 1, 64), "tp: 16 does not divide"),
    (torchtitan_toml, bundled_specs()["mixtral-8x7b"], Execution(1, 4, 8, 1, 64, ep=8),
     "model: mixtral-8x7b is a mixture of experts"),
    (torchtitan_toml, GPT3, TABLE5, "model: gpt3-175b is not a Llama")])
def test_exports_refuse_a_plan_the_framework_cannot_run(export, spec, layout, field):
    """A plan the framework would run otherwise than priced (a schedule it does not have, TP
    16 over 8 KV heads) or a model it would build otherwise is refused with one line naming
    the field, not handed over with a comment."""
    with pytest.raises(ConfigError, match=f"^{field}") as refused:
        export(spec, layout)
    assert "\n" not in str(refused.value) and "accepted" in str(refused.value)
    assert refused.value.field == field.partition(":")[0]  # dlsched plan names its option


@pytest.mark.parametrize(("name", "flavor"), [("llama3-8b", "8B"), ("llama3-70b", "70B"),
                                              ("llama3-405b", "405B")])
def test_torchtitan_names_its_own_flavors(name, flavor):
    """The bundled Llama 3 models are TorchTitan's llama3 flavors (its llama3_configs keys);
    another Llama shape keeps its own name with how to register it."""
    spec = bundled_specs()[name]
    layout = Execution(8, 1, 2, 1, 64)
    config, comments = titan(layout, spec=spec)
    assert config["model"] == {"name": "llama3", "flavor": flavor}
    assert not any("register flavor" in line for line in comments)
    wider = spec.replace(name="my-llama", layers=spec.layers * 2)
    config, comments = titan(layout, spec=wider)
    assert config["model"] == {"name": "llama3", "flavor": "my-llama"}
    assert any("register flavor 'my-llama'" in line for line in comments)
