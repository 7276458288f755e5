"""The data-parallel plan executor on 2 gloo ranks: every policy ends with DDP's parameters.

One spawn runs everything (both models, every policy, a hand-made plan with non-adjacent fused
blocks and split layers, real DistributedDataParallel) to keep the module's time small.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torch", reason="optional torch extra not installed")

from dlsched.dataparallel import POLICIES
from dlsched.dataparallel.plan import Block, DPPlan, Message
from dlsched.dataparallel.problem import DPProblem
from dlsched.errors import ConfigError
from dlsched.runtime.dataparallel.train import (
    REFERENCE,
    TrainConfig,
    agreed_profile,
    module_and_batch,
    problem_from_profile,
    run_plan,
    run_reference,
)
from dlsched.runtime.spawn import SpawnOptions, spawn

CONFIGS = {
    "resnet": TrainConfig(model="resnet", model_sizes={"widths": (4, 8)}, batch_size=2,
                          iterations=3, warmup=1, profile_repeats=1, return_parameters=True),
    "gpt": TrainConfig(model="gpt", model_sizes={"vocab": 64, "width": 16, "depth": 2,
                                                 "heads": 2, "context": 8},
                       batch_size=2, iterations=3, warmup=1, profile_repeats=1,
                       optimizer="adam", lr=1e-3, return_parameters=True),
}


def scrambled_plan(problem: DPProblem) -> DPPlan:
    """Layer 0 and the last layer fused (not adjacent in the flat buffer), and layer 1 split in
    two blocks sent in different messages; everything else one message, launched at the end."""
    last, end = problem.num_layers - 1, problem.backward_end
    half = problem.grad_bytes[1] // 8 * 4
    rest = [Block(k, 0, problem.grad_bytes[k]) for k in range(2, last)]
    return DPPlan((Message((Block(1, half, problem.grad_bytes[1] - half),), end),
                   Message((Block(last, 0, problem.grad_bytes[last]), Block(0, 0,
                            problem.grad_bytes[0])), end),
                   Message((*rest, Block(1, 0, half)), end)), barrier=False, policy="scrambled")


def _recording(initial: Any, batch: Any, problem: DPProblem, plan: DPPlan) -> tuple[int, bool,
                                                                                  bool]:
    """(spans recorded while recording was off for 2 steps and a forward, whether every span
    recorded after it was turned on starts at or after that forward's end, whether an executor
    built without a recorder refuses to record)."""
    import copy

    from dlsched.runtime.dataparallel.executor import PlanExecutor
    from dlsched.runtime.dataparallel.profile import default_loss
    from dlsched.runtime.dataparallel.train import optimizer_factory

    module = copy.deepcopy(initial)
    executor = PlanExecutor(module, problem, plan, optimizer_factory("sgd", 0.01), record=True)
    executor.set_recording(False)
    for _ in range(2):
        default_loss(module(batch)).backward()
    loss = default_loss(module(batch))
    off = len(executor.recorder.timeline(0.0)) if executor.recorder else -1
    switched = executor.forward_ends[-1]
    executor.set_recording(True)
    loss.backward()
    module(batch)
    spans = executor.recorder.timeline(0.0).spans if executor.recorder else []
    executor.finish()
    executor.close()
    plain = PlanExecutor(copy.deepcopy(initial), problem, plan, optimizer_factory("sgd", 0.01))
    try:
        plain.set_recording(True)
        refused = False
    except ConfigError:
        refused = True
    plain.close()
    return off, bool(spans) and all(span.start >= switched for span in spans), refused


def _update_groups(initial: Any, problem: DPProblem, plan: DPPlan) -> tuple[int, int]:
    """(optimizer groups of ``plan``'s executor, modules owning parameters)."""
    import copy

    from dlsched.runtime.dataparallel.executor import PlanExecutor
    from dlsched.runtime.dataparallel.profile import parameter_owners
    from dlsched.runtime.dataparallel.train import optimizer_factory

    executor = PlanExecutor(copy.deepcopy(initial), problem, plan, optimizer_factory("sgd", 0.01))
    executor.close()
    return len(executor.groups), len(parameter_owners(initial))


def _every_policy(rank: int, world_size: int) -> dict[str, dict[str, Any]]:
    results = {}
    for name, config in CONFIGS.items():
        initial, batch = module_and_batch(config, rank)
        agreed = agreed_profile(initial, batch, config, world_size)
        problem = problem_from_profile(agreed, "ring:1Gb/s,10us", world_size)
        plans = [POLICIES[policy](problem) for policy in POLICIES] + [scrambled_plan(problem)]
        runs = [run_plan(plan, initial, batch, problem, config) for plan in plans]
        runs.append(run_reference(initial, batch, config))
        results[name] = {run.policy: (run.parameters, len(run.timeline)) for run in runs}
        results[name]["recording"] = (_recording(initial, batch, problem, plans[0]), 0)
        results[name]["groups"] = (_update_groups(initial, problem, POLICIES["ddp"](problem)), 0)
        results[name]["initial"] = ({k: p.detach().clone()
                                     for k, p in initial.named_parameters()}, 0)
        results[name]["profile"] = ({layer.name: (layer.params, layer.forward_time_s,
                                                  layer.backward_time_s)
                                     for layer in agreed.layers}, 0)
    return results


@pytest.fixture(scope="module")
def ranks() -> list[dict[str, dict[str, Any]]]:
    return spawn(_every_policy, 2, (), SpawnOptions(timeout_s=120, deadline_s=500))


@pytest.mark.parametrize("model", sorted(CONFIGS))
@pytest.mark.parametrize("policy", [*POLICIES, "scrambled"])
def test_policy_parameters_equal_ddp(ranks: list[dict[str, dict[str, Any]]], model: str,
                                     policy: str) -> None:
    """After 3 steps (SGD with momentum on the CNN, Adam on the GPT with its tied embedding)
    each policy's parameters equal DistributedDataParallel's on both ranks, and training moved
    them away from the initial values."""
    import torch

    for result in ranks:
        ours, spans = result[model][policy]
        reference, _ = result[model][REFERENCE]
        initial, _ = result[model]["initial"]
        assert ours.keys() == reference.keys()
        for key in reference:
            torch.testing.assert_close(ours[key], reference[key], rtol=1e-5, atol=1e-6)
        assert any(not torch.equal(reference[k], initial[k]) for k in reference)
        assert spans > 0


@pytest.mark.parametrize("model", sorted(CONFIGS))
def test_profile_in_training_covers_every_parameter(ranks: list[dict[str, dict[str, Any]]],
                                                    model: str) -> None:
    """The default profile, measured inside training (barrier plan through the executor), has
    one layer per parameter with its size, finite non-negative times, some backward on each
    rank's view, forward on the module's last parameter, and every rank agrees on it."""
    import math

    layers, _ = ranks[0][model]["profile"]
    initial, _ = ranks[0][model]["initial"]
    assert list(layers) == list(initial)
    assert [p for p, _, _ in layers.values()] == [t.numel() for t in initial.values()]
    assert all(math.isfinite(f) and f >= 0 and math.isfinite(b) and b >= 0
               for _, f, b in layers.values())
    assert sum(b for _, _, b in layers.values()) > 0
    assert list(layers.values())[-1][1] > 0
    assert all(result[model]["profile"][0] == layers for result in ranks)


@pytest.mark.parametrize("model", sorted(CONFIGS))
def test_recording_only_when_switched_on(ranks: list[dict[str, dict[str, Any]]],
                                         model: str) -> None:
    """An executor with its recording switched off records nothing in 2 steps and a forward;
    switched on, it records the next backward and forward (every span starts at or after that
    forward's end); one built without a recorder refuses to record (run_plan measures
    unrecorded steps, then records one more backward and forward for the timeline)."""
    for result in ranks:
        (off, after_switch, refused), _ = result[model]["recording"]
        assert off == 0 and after_switch and refused



@pytest.mark.parametrize("model", sorted(CONFIGS))
def test_barrier_plan_updates_in_one_group(ranks: list[dict[str, dict[str, Any]]],
                                           model: str) -> None:
    """A barrier plan (DDP's buckets) waits for every message before the first forward, so
    all of the modules owning parameters (several) are updated by one optimizer call."""
    (groups, owners), _ = ranks[0][model]["groups"]
    assert groups == 1 < owners
