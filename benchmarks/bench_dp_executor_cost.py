"""What the data-parallel plan executor costs the training thread, against real torch DDP:
CPU seconds per step on one rank, where no message has anyone to wait for.

One gloo rank (world size 1, 1 torch thread, pinned to one CPU) trains each model of the DP
runtime benchmark (``bench_dp_runtime.MODELS``) with SGD + momentum: plain training (one
optimizer, gradients set to None), real ``DistributedDataParallel`` with its defaults, and the
``PlanExecutor`` running DDP's bucket plan (the same messages as torch DDP: the executor's own
cost) and WFBP's plan (one message per parameter tensor: what each further message costs the
training thread). The variants take turns in ``BLOCKS`` blocks of ``STEPS`` steps (after 3
warm-up steps each), so a drift of the machine reaches all of them; per block the main
thread's CPU time per step, and per variant the median over blocks of its ratio to torch
DDP's in the same block (a paired comparison) with the quartiles of those ratios; per model
the median over blocks of (WFBP's - DDP's plan) / (their difference in messages).

Run: ``python -m benchmarks.bench_dp_executor_cost`` (rewrites its section of BENCHMARKS.md;
about two minutes on the 2-core VM). Needs torch.
"""

from __future__ import annotations

import copy
import importlib
import os
import statistics
import time
from collections.abc import Callable

from benchmarks.bench_dp_runtime import MODELS
from benchmarks.common import host_facts, host_text, write_section
from dlsched.runtime.spawn import SpawnOptions, spawn

BLOCKS, STEPS, WARMUP = 24, 4, 3
NETWORK = "ring:10Gb/s,0us"
PLANS = ("ddp", "wfbp")
REFERENCE = "torch DDP"


def _variants(model: str) -> dict[str, tuple[Callable[[], None], int]]:
    """One training step per call for each variant, all from the same initial parameters,
    and the messages it sends per step."""
    from torch.nn.parallel import DistributedDataParallel

    from dlsched.dataparallel import POLICIES
    from dlsched.dataparallel.plan import DPPlan
    from dlsched.runtime.dataparallel.executor import PlanExecutor
    from dlsched.runtime.dataparallel.profile import default_loss, profile
    from dlsched.runtime.dataparallel.train import (
        TrainConfig,
        module_and_batch,
        optimizer_factory,
        problem_from_profile,
    )

    initial, batch = module_and_batch(TrainConfig(model=model, **MODELS[model]), 0)
    optimizer = optimizer_factory("sgd", 0.01)
    problem = problem_from_profile(profile(copy.deepcopy(initial), batch, name=model),
                                   NETWORK, 2)
    plain = copy.deepcopy(initial)
    plain_step = optimizer(list(plain.parameters()))
    ddp = DistributedDataParallel(copy.deepcopy(initial))
    ddp_step = optimizer(list(ddp.parameters()))

    def train_plain() -> None:
        default_loss(plain(batch)).backward()
        plain_step.step()
        plain_step.zero_grad()

    def train_ddp() -> None:
        default_loss(ddp(batch)).backward()
        ddp_step.step()
        ddp_step.zero_grad()

    def executed(plan: DPPlan) -> tuple[Callable[[], None], int]:
        module = copy.deepcopy(initial)
        PlanExecutor(module, problem, plan, optimizer)
        return (lambda: default_loss(module(batch)).backward()), len(plan.messages)

    plans = {policy: POLICIES[policy](problem) for policy in PLANS}
    return {"plain training": (train_plain, 0),
            REFERENCE: (train_ddp, len(plans["ddp"].messages)),
            **{f"executor, {policy}'s plan": executed(plan) for policy, plan in plans.items()}}


def _rank(rank: int, world_size: int, model: str) -> dict[str, tuple[int, list[float]]]:
    """Per variant, its messages per step and the CPU ms per step of each block (runs on the
    one rank)."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    variants = _variants(model)
    for step, _ in variants.values():
        for _ in range(WARMUP):
            step()
    blocks: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(BLOCKS):
        for name, (step, _) in variants.items():
            start = time.thread_time()
            for _ in range(STEPS):
                step()
            blocks[name].append((time.thread_time() - start) / STEPS * 1e3)
    return {name: (variants[name][1], values) for name, values in blocks.items()}


def rows(model: str) -> tuple[list[str], float]:
    """Table rows of one model, and the training thread's CPU per further message (us)."""
    # the ranks import the function by name: this module's, not __main__'s under ``-m``
    rank = importlib.import_module("benchmarks.bench_dp_executor_cost")._rank
    blocks = spawn(rank, 1, (model,), SpawnOptions(timeout_s=300, deadline_s=900))[0]
    _, reference = blocks[REFERENCE]
    out = []
    for name, (messages, values) in blocks.items():
        ratios = [100 * (value / ref - 1) for value, ref in zip(values, reference, strict=True)]
        low, median, high = statistics.quantiles(ratios, n=4)
        out.append(f"| {model} | {name} | {messages} | {statistics.median(values):.1f} | "
                   f"{median:+.1f} | {low:+.1f} to {high:+.1f} |")
    (few, buckets), (many, singles) = (blocks[f"executor, {policy}'s plan"] for policy in PLANS)
    per_message = statistics.median(1e3 * (b - a) / (many - few)
                                    for a, b in zip(buckets, singles, strict=True))
    return out, per_message


def main() -> None:
    """Measure every model and write the table."""
    before = host_facts()
    measured = {model: rows(model) for model in MODELS}
    markdown = "\n".join([
        "## Data-parallel executor: CPU per step against torch DDP",
        "",
        "One gloo rank pinned to one CPU, 1 torch thread, SGD with momentum; each variant "
        f"trains {BLOCKS} blocks of {STEPS} steps, the variants taking turns. CPU time of the "
        "training thread per step (ms, median over blocks) and, per block, against torch DDP's "
        "block beside it (%, median and quartiles over blocks). Plans made from the model's "
        f"plain-pass profile for 2 workers on `{NETWORK}` (`python -m "
        "benchmarks.bench_dp_executor_cost`).",
        "",
        "| model | variant | messages per step | CPU per step (ms) | vs torch DDP (%, median) "
        "| quartiles (%) |",
        "|---|---|---:|---:|---:|---|",
        *(line for table, _ in measured.values() for line in table),
        "",
        "- Training-thread CPU per further message (WFBP's plan against DDP's, median over "
        "blocks): " + ", ".join(f"{model} {cost:.0f} us" for model, (_, cost)
                                in measured.items()) + ".",
        f"- Machine: {host_text(before)}.",
    ])
    write_section("dp-executor-cost", markdown)


if __name__ == "__main__":
    main()
