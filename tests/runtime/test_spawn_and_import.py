"""The runtime's process plumbing: lazy torch import; a rank dying mid-training never hangs."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time

import pytest

from dlsched.errors import ConfigError
from dlsched.runtime.dataparallel.train import (
    TrainConfig,
    module_and_batch,
    optimizer_factory,
    problem_from_profile,
)
from dlsched.runtime.spawn import RankFailure, SpawnOptions, spawn

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="optional torch extra not installed")


def test_import_dlsched_does_not_import_torch() -> None:
    """``import dlsched`` (and the CLI, and dlsched.runtime itself) never loads torch."""
    code = ("import sys, dlsched, dlsched.cli.app, dlsched.runtime; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "False"


def _die_while_training(rank: int, world_size: int) -> None:
    from dlsched.dataparallel import POLICIES
    from dlsched.runtime.dataparallel.executor import PlanExecutor
    from dlsched.runtime.dataparallel.profile import default_loss, profile

    config = TrainConfig(model="resnet", model_sizes={"widths": (4,)}, batch_size=2)
    module, batch = module_and_batch(config, rank)
    problem = problem_from_profile(profile(module, batch, warmup=0, repeats=1),
                                   "ring:1Gb/s,10us", world_size)
    PlanExecutor(module, problem, POLICIES["usbyte"](problem), optimizer_factory("sgd", 0.1))
    for step in range(5):
        if rank == 1 and step == 2:
            os._exit(3)
        default_loss(module(batch)).backward()


@needs_torch
def test_rank_dying_mid_training_fails_the_run_instead_of_hanging() -> None:
    """Rank 1 exits in its third step: RankFailure names it (and rank 0's own error shows
    up or rank 0 is stopped), long before the deadline."""
    start = time.monotonic()
    with pytest.raises(RankFailure, match=r"rank 1 failed \(exit code 3\)"):
        spawn(_die_while_training, 2, (), SpawnOptions(timeout_s=30, grace_s=5,
                                                       deadline_s=300))
    assert time.monotonic() - start < 200


def test_functions_that_cannot_be_imported_by_name_are_refused() -> None:
    """A lambda cannot run on a spawned rank: refused before anything starts."""
    with pytest.raises(ConfigError, match="module-level function"):
        spawn(lambda rank, world: None, 2)


def _priorities(rank: int, world_size: int) -> dict[str, int]:
    import threading

    from dlsched.runtime.dataparallel.calibrate import time_loads

    timed = time_loads(rank, world_size, (4096, 65536), 1, 2, "both", attempts=1)
    assert set(timed) - {"refused"} == {"none", "compute", "compute_slowdown",
                                        "compute_samples", "stream", "idle_stream",
                                        "none_times", "compute_times", "stream_times",
                                        "idle_stream_times", "rejected"}
    assert all(len(times) == 2 for key in ("none_times", "compute_times", "stream_times",
                                           "idle_stream_times")
               for _, times in timed[key])
    for samples in (timed[key] for key in ("none", "compute", "compute_slowdown", "stream",
                                           "idle_stream")):
        assert [b for b, _ in samples] == [4096, 65536] and all(s > 0 for _, s in samples)
    assert all(len(repeats) == 2 and all(len(ranks) == world_size for ranks in repeats)
               for _, repeats in timed["compute_samples"])
    me = threading.get_native_id()
    return {("main" if int(t) == me else open(f"/proc/self/task/{t}/comm").read().strip()):
            os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir("/proc/self/task")}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux")
@needs_torch
def test_comm_nice_reaches_the_communication_threads_not_the_compute_thread() -> None:
    """With comm_nice 7 (no privilege needed), gloo's threads run at nice 7 and the rank's
    own thread keeps its nice; a calibration idle and loaded (computing while the all-reduce
    runs) returns one positive time per size and load, and a positive compute slowdown per
    size."""
    own = os.getpriority(os.PRIO_PROCESS, 0)
    ranks = spawn(_priorities, 2, (), SpawnOptions(timeout_s=60, deadline_s=200,
                                                   comm_nice=max(7, own)))
    for threads in ranks:
        assert threads["main"] == own
        gloo = {name: nice for name, nice in threads.items() if "gloo" in name}
        assert gloo and set(gloo.values()) == {max(7, own)}, threads


def test_comm_nice_out_of_range_is_refused() -> None:
    with pytest.raises(ConfigError, match="comm_nice"):
        SpawnOptions(comm_nice=-21)
