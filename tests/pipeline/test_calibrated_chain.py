"""A calibrated chain prices blocks in seconds x the graph's FLOP/s, and re-prices them at each
tensor-parallel degree rather than dividing by it."""

import numpy as np
import pytest

from dlsched.experiments.megatron import MegatronRow, a100_compute, megatron_plan, row_problem
from dlsched.models.zoo import gpt_model
from dlsched.pipeline.chains.calibrated_chain import block_seconds
from dlsched.pipeline.chains.tensor_parallel import tp_allreduce_s
from dlsched.pipeline.simulation.simulate import simulate

ROW = MegatronRow(0.1, 8, 512, 4, 2, 2, 16, 32, 100, 2)  # a small model, TP 2 x PP 2 x DP 4


def test_stage_times_are_calibrated_seconds():
    """At TP 1 a block's time on the graph is its calibrated forward/backward seconds, the
    backward's with the SC21 code's gradient accumulation: 6 bytes moved per 2-byte (fp16)
    parameter at the GPU's memory rate."""
    compute = a100_compute()
    problem = row_problem(ROW, compute)
    model = gpt_model(ROW.name, ROW.hidden, ROW.layers, ROW.heads, 2048, 51200)
    forward, backward = block_seconds(model, ROW.microbatch, compute)
    rate = problem.graph.devices[0].flops
    accumulate = problem.chain.param_bytes * 3 / compute.gpu.memory_rate
    assert problem.chain.accumulation_per_byte == 3
    assert problem.chain.forward_flops / rate == pytest.approx(forward)
    assert problem.chain.backward_flops / rate == pytest.approx(backward + accumulate)


def test_tensor_parallel_reprices_and_adds_the_exchanges():
    """At TP 2 a layer costs its seconds priced at degree 2 (norms and residuals repeated, not
    halved) plus its two blocking all-reduces, forward and backward (priced as NCCL's tuner
    prices them: the row's problem runs on a DGX A100 node)."""
    from dataclasses import replace

    compute = a100_compute()
    problem = row_problem(ROW, compute, ("none",))
    split = problem.tensor(2)
    model = gpt_model(ROW.name, ROW.hidden, ROW.layers, ROW.heads, 2048, 51200)
    forward, _ = block_seconds(model, ROW.microbatch, replace(compute, tensor_parallel=2))
    rate = problem.graph.devices[0].flops
    layout = problem.chain.tensor_layout
    message = tp_allreduce_s(problem.graph, split.gpu_groups[0], layout.message_bytes,
                             problem.nccl)  # NCCL's tuner on the DGX A100, as the evaluator
    layer = list(problem.chain.block_names).index("h.0")
    assert split.chain.forward_flops[layer] == pytest.approx(
        forward[layer] * rate + 2 * message * rate)
    halved = problem.chain.forward_flops[layer] / 2
    assert split.chain.forward_flops[layer] - 2 * message * rate > halved


def test_megatron_plan_runs_equal_stages():
    """Megatron's plan: PP stages of equal layer counts, embedding first, head last, full
    recomputation at its TP degree; the simulator accepts it."""
    problem = row_problem(ROW, a100_compute())
    plan = megatron_plan(problem, ROW)
    assert plan.tensor_parallel == 2 and plan.recompute == "full"
    assert [(s.first, s.last) for s in plan.stages] == [(0, 3), (3, 6)]
    result = simulate(problem, plan)
    assert np.isfinite(result.iteration_s) and result.iteration_s > 0


def test_pipeline_plan_prices_a_zoo_model_on_a_calibrated_gpu(run_cli, tmp_path):
    """--gpu prices the blocks on the calibrated GPU: a one-GPU plan's iteration is the
    microbatches' calibrated forward + backward seconds, each block as one of a stage's blocks
    run back to back; chain files are refused."""
    import json
    from itertools import groupby

    from dlsched.models import calibrated, get_model

    one = tmp_path / "one.yaml"
    one.write_text("servers: [{count: 1, gpu: {flops: 100 TFLOP/s, memory: 80 GiB}, "
                   "link: {bandwidth: 300 GB/s}}]\n")
    code, out, err = run_cli("pipeline", "plan", "--model", "bert-base", "--devices", str(one),
                             "--microbatches", "4", "--planner", "1f1b", "--recompute", "none",
                             "--gpu", "h100", "--json")
    assert code == 0, err
    row = json.loads(out)["rows"][0]
    compute, model = calibrated("h100"), get_model("bert-base")
    blocks = [list(group) for _, group in groupby(model.layers,
                                                  key=lambda layer: layer.block or layer.name)]
    forward = sum(compute.repeated_time(block, 1, False) for block in blocks)
    backward = sum(compute.repeated_time(block, 1, True) for block in blocks)
    assert row["iteration_s"] == pytest.approx(4 * (forward + backward))
    chain = tmp_path / "c.yaml"
    chain.write_text("blocks: [{name: a, forward_flops: 1e9}]\n")
    code, _, err = run_cli("pipeline", "plan", "--model", str(chain), "--devices",
                           "1x8-NVLink", "--gpu", "h100")
    assert code == 2 and "--gpu" in err
