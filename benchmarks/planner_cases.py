"""The planning instances of the planner-speed differential check (issue 23, item 4) and how
one is planned and recorded.

Cases: the benchmark's (a 96-layer GPT-3-like chain and the zoo's GPT-3 175B on 8 x 8 and
64 x 8 GPUs, 16 microbatches), every scenario of ``reproduce pipeline`` under both network
modes, and seeded random small instances (``dlsched.pipeline.chains.random_cases``). Each case is
planned by every baseline and then by dlsched with the baselines' plans handed in as candidates, as
``experiments.pipeline.run_scenario`` does (dlsched's total planning time is its own plus the
baselines'). A record keeps, per planner, the simulated iteration (s), the CPU-seconds
(``time.process_time``) and a fingerprint of the plan (stages, TP degree, recomputation and
every GPU's action order), so two records show whether a plan moved and whether it got slower.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import replace
from typing import Any

from benchmarks.bench_pipeline import gpt3_like_chain
from dlsched.errors import ConfigError
from dlsched.hardware import load_devices
from dlsched.hardware.device_graph import cluster_graph
from dlsched.models.zoo import get_model
from dlsched.pipeline import (
    BASELINES,
    PipelinePlan,
    PipelineProblem,
    chain_from_model,
    simulate,
)
from dlsched.pipeline.chains.model_source import load_chain
from dlsched.pipeline.chains.random_cases import random_problem
from dlsched.pipeline.planners.planner import plan_dlsched

RANDOM_CASES = 40




def bench_problems() -> dict[str, PipelineProblem]:
    """The benchmark's instances: both models on 64 and 512 GPUs, 16 microbatches."""
    chains = {"gpt3-like-96": gpt3_like_chain(),
              "gpt3-175b": chain_from_model(get_model("gpt3-175b"), 1)}
    return {f"bench {name} {servers * 8}": PipelineProblem(
                chain, cluster_graph(servers, 8, flops=400e12), 16)
            for name, chain in chains.items() for servers in (8, 64)}


REPRODUCE = (
    ("vgg19", 32, "1x8-NVLink", 16, None),
    ("vgg19", 32, "hetero-islands", 16, None),
    ("vgg19", 32, "hetero-islands", 16, ("full",)),
    ("bert-large", 32, "2x8-NVLink-100Gb", 16, None),
    ("bert-large", 32, "hetero-NVLink-PCIe", 16, None),
    ("bert-large", 32, "2x8-NVLink-100Gb", 16, ("selective",)),
    ("gpt2-xl", 4, "2x8-NVLink-100Gb", 16, None),
    ("gpt2-xl", 4, "4x4-PCIe-25Gb", 16, None),
    ("gpt2-xl", 4, "hetero-NVLink-PCIe", 32, None),
    ("gpt2-xl", 4, "4x4-PCIe-25Gb", 16, ("full",)),
    ("gpt3-175b", 1, "8x8-NVLink-200Gb", 32, None),
)


def reproduce_problems() -> dict[str, PipelineProblem]:
    """The scenarios of ``reproduce pipeline`` (``experiments.pipeline.SCENARIOS``) under
    both network modes."""
    problems = {}
    for network in ("fifo", "ps"):
        for model, size, devices, m, modes in REPRODUCE:
            problem = PipelineProblem(load_chain(model, size), load_devices(devices), m,
                                      network=network)
            if modes is not None:
                problem = replace(problem, recompute_modes=modes)
            label = "/".join(modes) if modes else "any"
            problems[f"reproduce {network} {model} {devices} {label}"] = problem
    return problems


def random_problems() -> dict[str, PipelineProblem]:
    """``RANDOM_CASES`` seeded random small instances."""
    return {f"random {seed}": random_problem(seed) for seed in range(RANDOM_CASES)}


def fingerprint(plan: PipelinePlan) -> str:
    """A short hash of what the plan runs: stages, TP, recomputation, DDP buckets, orders
    (its notes are recorded beside it)."""
    text = "|".join((plan.stages_text(), str(plan.tensor_parallel), plan.recompute,
                     str(plan.ddp_buckets), plan.schedule_text()))
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _entry(problem: PipelineProblem, plan: PipelinePlan | None, cpu_s: float,
           error: str | None) -> dict[str, Any]:
    if plan is None:
        return {"iteration_s": None, "cpu_s": cpu_s, "plan": None, "error": error}
    return {"iteration_s": float(simulate(problem, plan).iteration_s), "cpu_s": cpu_s,
            "plan": fingerprint(plan), "stages": plan.num_stages,
            "tp": plan.tensor_parallel, "recompute": plan.recompute,
            "notes": {key: str(value) for key, value in plan.notes.items()}, "error": None}


def plan_case(problem: PipelineProblem) -> dict[str, dict[str, Any]]:
    """Every baseline, then dlsched with their plans as candidates; per planner its record
    (``dlsched`` CPU-seconds are its own, ``dlsched total`` adds the baselines')."""
    record: dict[str, dict[str, Any]] = {}
    plans: dict[str, PipelinePlan] = {}
    for name, planner in BASELINES.items():
        start = time.process_time()
        try:
            plan, error = planner(problem), None
        except ConfigError as exc:
            plan, error = None, str(exc).splitlines()[0]
        record[name] = _entry(problem, plan, time.process_time() - start, error)
        if plan is not None:
            plans[name] = plan
    handed = {name: (lambda _, plan=plan: plan) for name, plan in plans.items()}
    start = time.process_time()
    try:
        plan, error = plan_dlsched(problem, handed), None
    except ConfigError as exc:
        plan, error = None, str(exc).splitlines()[0]
    record["dlsched"] = _entry(problem, plan, time.process_time() - start, error)
    record["dlsched total"] = {"cpu_s": sum(entry["cpu_s"] for entry in record.values())}
    return record
