"""Context parallelism (``job.context_parallel``): the ring's exposed step time and the
Ulysses All-to-All's bytes by hand on one dimension, conserved bytes, activation memory over
CP against Korthikanti et al.'s formula, ZeRO over CP x DP, the search choosing CP for a long
sequence, refusals, and CP 1 unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from dlsched.errors import ConfigError
from dlsched.job.cluster import load_cluster
from dlsched.job.communication.context_parallel import (
    check_cp,
    cp_cost,
    kv_block_bytes,
    output_bytes,
    qkv_bytes,
)
from dlsched.job.compute.layer_costs import ATTENTION_CORE, decoder_model
from dlsched.job.evaluation.evaluate import Job, evaluate
from dlsched.job.execution import Execution
from dlsched.job.memory.per_gpu import layer_activations, memory_per_gpu
from dlsched.job.model_spec import Model, bundled_specs
from dlsched.job.run_settings import RunSettings
from dlsched.job.search import SPACES, search

LLAMA_32K = bundled_specs()["llama3-70b"].replace(seq=32768)
NIC = (50e9, 5e-6)  # dgx-h100's NIC per GPU each way (B/s) and latency (s)


def _layout(tp: int, cp: int, algorithm: str = "ring", recompute: str = "none",
            dp: int = 1) -> Execution:
    return Execution(tp, 1, dp, 1, 8 * dp, recompute=recompute, cp=cp, cp_algorithm=algorithm)


def test_ring_step_exposes_what_its_transfer_outlasts_the_block_attention() -> None:
    """TP 8 x CP 2 on two DGX H100 nodes: the CP pair crosses the NIC. K/V block = 2 x 16,384
    tokens x 1 KV head x 128 x 2 B = 8,388,608 B; one forward transfer of it, 5 us + 8,388,608
    / 50e9 = 172.77216 us, against a block attention of core / cp = 100 us: 72.77216 us
    exposed; the backward sends K/V then dK/dV (the same bytes each), each against 150 us."""
    layout = _layout(8, 2)
    assert kv_block_bytes(LLAMA_32K, layout) == 8_388_608
    group = load_cluster("dgx-h100", 16, None).group_topology(8, 2)
    cost = cp_cost(LLAMA_32K, layout, group, "baseline", 200e-6, 300e-6)
    step = NIC[1] + 8_388_608 / NIC[0]
    assert step == pytest.approx(172.77216e-6)
    assert cost.forward_s == pytest.approx(step - 100e-6)
    assert cost.backward_s == pytest.approx(2 * (step - 150e-6))
    hidden = cp_cost(LLAMA_32K, layout, group, "baseline", 2 * step, 2 * step)
    assert hidden.forward_s == 0.0 and hidden.backward_s == 0.0


def test_ring_of_four_sends_k_v_then_both_then_gradients() -> None:
    """CP 4 over four nodes, 8,192 tokens per GPU: forward 3 transfers of the block, the
    backward 2, 4, 4, 2 half-blocks (K/V; K/V + dK/dV; ...; dK/dV), nothing to hide behind."""
    layout = _layout(8, 4)
    block = kv_block_bytes(LLAMA_32K, layout)
    assert block == 2 * 8192 * 128 * 2
    group = load_cluster("dgx-h100", 32, None).group_topology(8, 4)
    cost = cp_cost(LLAMA_32K, layout, group, "baseline", 0.0, 0.0)
    half = block / 2
    assert cost.forward_s == pytest.approx(3 * (NIC[1] + block / NIC[0]))
    assert cost.backward_s == pytest.approx(sum(NIC[1] + n * half / NIC[0] for n in (2, 4, 4, 2)))


@pytest.mark.parametrize("cp", [2, 4, 8])
def test_ring_bytes_are_conserved(cp: int) -> None:
    """Each GPU receives the K/V of the other cp - 1 in the forward (and sends as much on),
    and in the backward passes K/V round again and brings every dK/dV home: 2 (cp - 1)
    blocks."""
    layout = _layout(8, cp)
    group = load_cluster("dgx-h100", 8 * cp, None).group_topology(8, cp)
    cost = cp_cost(LLAMA_32K, layout, group, "baseline", 1.0, 1.0)
    block = kv_block_bytes(LLAMA_32K, layout)
    assert cost.forward_bytes == (cp - 1) * block
    assert cost.backward_bytes == 2 * (cp - 1) * block
    assert cost.forward_s == 0.0  # a second of attention hides every transfer


def test_ulysses_all_to_all_bytes_and_time_by_hand() -> None:
    """TP 4 x CP 2 inside one node (ranks 4 apart: NVLink): Q, K, V of 16,384 tokens x
    (8,192 + 2 x 8 x 128) / 4 x 2 B = 83,886,080 B and the output 16,384 x 8,192 / 4 x 2 B =
    67,108,864 B; an All-to-All of two sends half its buffer straight to the peer, as NCCL
    runs it (collectives.nccl_alltoall): 8.4 + 3.4 us (the ring's Simple base and NVLink step
    latencies) + B / 2 / 370.8e9 (the H100's 450 GB/s NVLink at NCCL's credit 20.6 / 25); the
    backward the same, the selective recomputation's rerun on top."""
    layout = _layout(4, 2, "all-to-all")
    assert qkv_bytes(LLAMA_32K, layout) == 83_886_080
    assert output_bytes(LLAMA_32K, layout) == 67_108_864
    group = load_cluster("dgx-h100", 8, None).group_topology(4, 2)
    forward = sum(11.8e-6 + b / 2 / (450e9 * 20.6 / 25) for b in (83_886_080, 67_108_864))
    cost = cp_cost(LLAMA_32K, layout, group, "baseline", 1.0, 1.0)
    assert cost.forward_s == pytest.approx(forward)
    assert cost.backward_s == pytest.approx(forward)
    assert cost.forward_bytes == 83_886_080 + 67_108_864
    again = cp_cost(LLAMA_32K, replace(layout, recompute="selective"), group, "baseline", 1, 1)
    assert again.backward_s == pytest.approx(2 * forward)


def test_local_model_runs_a_cp_share_of_every_op() -> None:
    """One GPU of CP 2: token-wise GEMMs at s / 2 tokens, the attention core (s / 2) x s
    (ring) or s x s on half the heads (all-to-all): each half the FLOP without CP."""
    whole = decoder_model(LLAMA_32K, attention="unfused")
    for algorithm in ("ring", "all-to-all"):
        local = decoder_model(LLAMA_32K, 1, 2, algorithm, "unfused")
        for mine, full in zip(local.layers, whole.layers, strict=True):
            if mine.block == "h.0":
                assert mine.forward_flops == pytest.approx(full.forward_flops / 2)
        core = [op for layer in local.layers for op in layer.ops if op.label in ATTENTION_CORE
                and op.kind == "gemm"]
        s, h = 32768, 8192
        assert [op.flops for op in core] == [2 * (s // 2) * s * h] * 2
    scores = next(op for layer in whole.layers for op in layer.ops if op.label == "scores")
    assert scores.shape == (32768, 32768, 128, 64)  # CP 1: the model as before
    assert scores.elements == 2 * 32768 * 8192 + 64 * 32768**2


def test_flash_core_under_cp_is_one_causal_kernel_of_its_shape() -> None:
    """With the fused kernel each GPU's core is one causal attention op: the ring's s / 2
    queries against all s keys on every head, the all-to-all's s x s on half the heads; each
    4 q k (heads x 128) FLOP, half the FLOP of CP 1's kernel, and K/V read at the 8 KV heads'
    width."""
    s, heads, d = 32768, 64, 128
    whole = decoder_model(LLAMA_32K)
    for algorithm, shape in (("ring", (s // 2, s, heads, 1)),
                             ("all-to-all", (s, s, heads // 2, 1))):
        local = decoder_model(LLAMA_32K, 1, 2, algorithm)
        core = [op for layer in local.layers for op in layer.ops if op.label in ATTENTION_CORE]
        queries, keys, core_heads, _ = shape
        assert [(op.kind, op.shape) for op in core] == [("attention", shape)]
        assert core[0].flops == 4 * queries * keys * core_heads * d
        kv_width = 8 * d * core_heads // heads
        assert core[0].elements == 2 * queries * core_heads * d + 2 * keys * kv_width
    full = next(op for layer in whole.layers for op in layer.ops if op.label in ATTENTION_CORE)
    assert full.flops == 2 * core[0].flops


GPT = Model("gpt", 4, 4096, 32, 8192, 51200)  # 4 h FFN, K/V as wide as h


@pytest.mark.parametrize("cp", [1, 2, 4])
def test_activations_divide_by_cp_as_korthikanti_with_s_over_cp(cp: int) -> None:
    """Korthikanti et al. Table 2 with SP over t: selective ``34 s b h / t``, none ``s b h (34
    + 5 a s / h) / t``; under CP the tokens are s / cp and the scores (s / cp) x s."""
    s, b, h, a, t = GPT.seq, 1, GPT.hidden, GPT.heads, 4
    layout = Execution(t, 1, 1, b, 8, recompute="selective", sequence_parallel=True, cp=cp)
    selective, _ = layer_activations(GPT, layout, "bf16", "unfused")
    assert selective == pytest.approx(34 * (s / cp) * b * h / t)
    none, _ = layer_activations(GPT, replace(layout, recompute="none"), "bf16", "unfused")
    assert none == pytest.approx((34 * (s / cp) * b * h + 5 * a * (s / cp) * s * b) / t)


def test_zero_shards_over_cp_times_dp() -> None:
    """CP 2 x DP 2 with ZeRO 1 keeps the optimizer state of DP 4: Megatron-Core's distributed
    optimizer shards over the data-parallel group with CP."""
    four = memory_per_gpu(GPT, Execution(4, 1, 4, 1, 8, zero=1), "bf16")
    two = memory_per_gpu(GPT, Execution(4, 1, 2, 1, 8, zero=1, cp=2), "bf16")
    assert two.optimizer == pytest.approx(four.optimizer)
    assert two.weights == pytest.approx(four.weights)
    one = memory_per_gpu(GPT, Execution(4, 1, 2, 1, 8, zero=1), "bf16")
    assert one.optimizer == pytest.approx(2 * four.optimizer)


def test_an_evaluated_cp_row_reports_its_exposed_cp_time() -> None:
    """Llama 3 70B at 32k on 64 GPUs, CP 2 over the NICs (TP 8): the row's exposed CP is
    microbatches x layers per rank x the per-layer cost, and CP 1 reports none."""
    cluster = load_cluster("dgx-h100", 64, None)
    job = Job(LLAMA_32K, cluster)
    layout = Execution(8, 4, 2, 1, 16, recompute="full", sequence_parallel=True, zero=1, cp=1)
    assert evaluate(job, layout).exposed["cp_s"] == 0.0
    layout = replace(layout, dp=1, cp=2)
    result = evaluate(job, layout)
    assert layout.group("cp", job.cluster).dims[0].bandwidth == NIC[0]
    assert result.exposed["cp_s"] >= 0.0
    assert result.iteration_s >= result.bound_s


def test_search_chooses_cp_for_a_long_sequence() -> None:
    """Llama 3 8B at 65,536 tokens on 32 H100s: without CP no layout keeps the activations
    in memory that CP's does, and the search picks CP > 1."""
    spec = bundled_specs()["llama3-8b"].replace(seq=65536)
    job = Job(spec, load_cluster("dgx-h100", 32, None))
    best = search(job, Execution.searching(global_batch=32, run=RunSettings(dp_policy="none")),
                  SPACES["dlsched"]).best
    assert best.layout.cp > 1


@pytest.mark.parametrize(("layout", "field"), [
    (_layout(8, 3), "cp"),  # 32,768 is not a multiple of 6
    (_layout(8, 2, "all-to-all"), "cp"),  # 8 KV heads over TP x CP = 16
])
def test_refusals_name_the_field(layout: Execution, field: str) -> None:
    """The field (``ConfigError.field``; dlsched plan says --cp, a ledger row parallel.cp)."""
    with pytest.raises(ConfigError, match=f"^{field}: ") as refused:
        check_cp(LLAMA_32K, layout)
    assert refused.value.field == field


def test_cp_algorithm_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"^cp_algorithm: 'tree' is not accepted"):
        Execution(8, 1, 1, 1, 8, cp=2, cp_algorithm="tree")


@pytest.mark.parametrize("args", [["--seq", "0"], ["--cp-algorithm", "tree"]])
def test_bad_cp_input_exits_2_with_one_line(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "dlsched", "plan", "--model", "llama3-70b",
                           "--cluster", "dgx-h100", "--gpus", "64", "--cp", "2", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert args[0] in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_cli_prints_a_32k_cp_row() -> None:
    """The issue's command: Llama 3 70B at 32,768 tokens, CP 2, one row with exposed CP."""
    done = subprocess.run([sys.executable, "-m", "dlsched", "plan", "--model", "llama3-70b",
                           "--seq", "32768", "--cp", "2", "--cluster", "dgx-h100", "--gpus",
                           "128", "--tp", "8", "--pp", "8", "--microbatch-size", "1",
                           "--global-batch", "64", "--recompute", "full", "--zero", "1",
                           "--sequence-parallel", "--schedule", "1f1b", "--chunks", "1",
                           "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["rows"]
    assert (row["cp"], row["cp_algorithm"], row["dp"]) == (2, "ring", 1)
    assert "exposed_cp_s" in row and row["mfu"] > 0


@pytest.mark.parametrize(("algorithm", "comm"), [("ring", "p2p"), ("all-to-all", "a2a")])
def test_exports_carry_cp(algorithm: str, comm: str) -> None:
    """Megatron-LM gets --context-parallel-size and --cp-comm-type (p2p | a2a), TorchTitan
    its context_parallel_degree; without CP neither flag is written."""
    from dlsched.job.exports.writers import megatron_args, torchtitan_toml

    layout = Execution(4, 1, 1, 1, 8, cp=2, cp_algorithm=algorithm)
    args = megatron_args(LLAMA_32K, layout).splitlines()[-1]
    assert f"--context-parallel-size 2 --cp-comm-type {comm}" in args
    assert "context_parallel_degree = 2" in torchtitan_toml(LLAMA_32K, layout)
    plain = megatron_args(LLAMA_32K, replace(layout, cp=1, dp=2))
    assert "--context-parallel-size" not in plain and "--cp-comm-type" not in plain
