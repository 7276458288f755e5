"""Time to train a plan: wall-clock days, GPU-hours, interruptions, goodput, checkpoints,
stragglers, energy and cost, from one row of ``dlsched plan`` (seconds, bytes, joules inside).

The row gives the iteration (``iteration_s``), its exposed communication (``exposed_*_s``), the
layout (``tp``, ``cp``, ``pp``, ``dp``, ``zero``, ``global_batch``, ``gpus``) and the memory
per GPU by part (``memory_weights_gib``, ``memory_optimizer_gib``). The job needs
``iterations`` (or ``tokens`` / (global batch x sequence)) iterations of the straggler-adjusted
mean iteration (``goodput.stragglers``): that is the failure-free work. Checkpoints
(``goodput.checkpoints``) set the blocking cost per checkpoint, the background write and the
restart's load; failures (``goodput.failures``) the expected wall time at the optimal checkpoint
interval; energy and cost (``goodput.energy``) follow from the seconds computing and waiting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dlsched.errors import ConfigError
from dlsched.goodput.checkpoints import DEFAULT_STORAGE, checkpoint_plan, load_storage
from dlsched.goodput.counts import parse_count
from dlsched.goodput.energy import DEFAULT_PUE, power_model, run_energy
from dlsched.goodput.failures import DEFAULT_MTBF_GPU_HOURS, expected_outcome, job_mtbf
from dlsched.goodput.stragglers import DEFAULT_SIGMA, straggling

GIB = 2**30
DAY_S = 86400.0
COMMUNICATION = ("exposed_tp_s", "exposed_pp_s", "exposed_dp_s", "exposed_cp_s",
                 "exposed_ep_a2a_s", "exposed_zero3_s")
"""The row's exposed communication: GPUs wait, neither computing nor slowed by stragglers."""
RESTART_S = 600.0
"""Seconds from a failure to training again, before the checkpoint load: detection, job
relaunch, process and NCCL start. Approximate: TrainMover (Lao et al., arXiv 2412.12636, 2024)
reports checkpoint-restart recovery of its 1,024-GPU baselines up to ~70x its own ~10 s
downtime, i.e. on the order of ten minutes; not fitted to any ledger row."""


@dataclass(frozen=True)
class Settings:
    """What the run needs besides the plan: ``tokens`` or ``iterations`` (counts, strings like
    "15.6T" accepted), GPU-hours between failures per GPU, PUE, price per GPU-hour, storage,
    checkpoint mode, restart seconds and the straggler spread."""

    tokens: str | float | None = None
    iterations: str | float | None = None
    mtbf_gpu_hours: float = DEFAULT_MTBF_GPU_HOURS
    pue: float = DEFAULT_PUE
    gpu_hour_price: float | None = None
    storage: str = DEFAULT_STORAGE
    checkpoint: str = "sync"
    restart_s: float = RESTART_S
    sigma: float = DEFAULT_SIGMA

    @property
    def wanted(self) -> bool:
        """Whether a time to train is asked for."""
        return self.tokens is not None or self.iterations is not None


def iterations_needed(settings: Settings, global_batch: int, seq: int) -> int:
    """Iterations to run: ``iterations``, or the tokens over global batch x sequence (rounded
    up); ConfigError when neither or both are given."""
    if (settings.tokens is None) == (settings.iterations is None):
        raise ConfigError("--tokens / --iterations: give exactly one; accepted: --tokens 15.6T "
                          "or --iterations 500k")
    if settings.iterations is not None:
        return math.ceil(parse_count(settings.iterations, "--iterations"))
    return math.ceil(parse_count(settings.tokens, "--tokens") / (global_batch * seq))


def time_to_train(row: dict[str, Any], seq: int, gpu: str, gpus_per_node: int,
                  settings: Settings) -> dict[str, Any]:
    """The time-to-train columns of a plan row (module docstring; units in the names)."""
    gpus = int(row["gpus"])
    exposed = sum(float(row.get(key) or 0.0) for key in COMMUNICATION)
    groups = {"tp": row["tp"] * row.get("cp", 1), "pipeline": row["tp"] * row.get("cp", 1)
              * row["pp"], "job": gpus}
    strag = straggling(row["iteration_s"], exposed, groups, settings.sigma)
    iterations = iterations_needed(settings, row["global_batch"], seq)
    storage = load_storage(settings.storage)
    ckpt = checkpoint_plan(row["memory_weights_gib"] * GIB, row["memory_optimizer_gib"] * GIB,
                           row["zero"], row.get("cp", 1) * row["dp"], gpus,
                           gpus_per_node, storage, settings.checkpoint, gpu)
    mtbf = job_mtbf(gpus, settings.mtbf_gpu_hours)
    work = iterations * strag.mean_s
    out = expected_outcome(work, ckpt.blocking_s, settings.restart_s + ckpt.load_s, mtbf,
                           durable_delay=ckpt.durable_s)
    busy = max(row["iteration_s"] - exposed, 0.0) / row["iteration_s"]
    waiting = out.checkpoint_s + out.restart_s
    nodes = math.ceil(gpus / gpus_per_node)
    energy = run_energy(power_model(gpu, gpus_per_node), gpus, nodes, out.wall_s - waiting,
                        waiting, busy, settings.pue, settings.gpu_hour_price)
    return {"iterations": iterations, "iteration_mean_s": strag.mean_s,
            "iteration_p50_s": strag.p50_s, "iteration_p95_s": strag.p95_s,
            **{f"straggler_{name}": value for name, value in strag.slowdowns.items()},
            "ttt_days": out.wall_s / DAY_S, "gpu_hours": gpus * out.wall_s / 3600.0,
            "interruptions": out.interruptions,
            "interruptions_per_day": out.interruptions / (out.wall_s / DAY_S),
            "goodput": out.goodput, "job_mtbf_h": mtbf / 3600.0,
            "checkpoint_interval_s": out.interval_s, "checkpoint_gb": ckpt.total_bytes / 1e9,
            "checkpoint_blocking_s": ckpt.blocking_s, "checkpoint_save_s": ckpt.save_s,
            "checkpoint_load_s": ckpt.load_s, "checkpoint_host_gib": ckpt.host_bytes / GIB,
            "lost_work_h": out.lost_s / 3600.0, "restart_h": out.restart_s / 3600.0,
            "energy_mwh": energy.mwh, "cost": energy.cost}
