"""Spawned ranks that die, hang or refuse their input: one line naming the rank at fault."""

from __future__ import annotations

import importlib
import os
import signal
import time

import pytest

from dlsched.errors import ConfigError

pytest.importorskip("torch", reason="spawned ranks need torch (pip install 'dlsched[torch]')")

from dlsched.runtime.spawn import RankFailure, SpawnOptions, spawn

OPTIONS = SpawnOptions(timeout_s=3, grace_s=2, deadline_s=120)


def _rank_one_hangs(rank: int, world_size: int) -> None:
    import torch
    import torch.distributed as dist

    if rank == 1:
        time.sleep(1000)
    dist.all_reduce(torch.ones(4))


def _rank_one_is_killed(rank: int, world_size: int) -> None:
    import torch
    import torch.distributed as dist

    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(torch.ones(4))


def _rank_one_refuses(rank: int, world_size: int) -> None:
    if rank == 1:
        raise ConfigError("comm-nice: setting nice -20 needs root")
    time.sleep(1000)


def test_a_hung_rank_is_blamed_not_the_one_that_waited_for_it() -> None:
    """Rank 1 sleeps; rank 0 times out in its all-reduce: the failure names rank 1 as hung
    (rank 0 only timed out waiting for it), on one line; the logs stay in ``details``."""
    with pytest.raises(RankFailure) as caught:
        spawn(_rank_one_hangs, 2, (), OPTIONS)
    message = str(caught.value)
    assert message.startswith("rank 1 hung") and "\n" not in message
    assert "rank 0 gave up" in message and "--- rank 0 ---" in caught.value.details


def test_a_killed_rank_is_named_with_its_signal() -> None:
    """Rank 1 is killed by SIGKILL: one line naming rank 1 and the signal, not rank 0 (which
    loses its peer)."""
    with pytest.raises(RankFailure) as caught:
        spawn(_rank_one_is_killed, 2, (), OPTIONS)
    message = str(caught.value)
    assert message.startswith("rank 1 failed (killed by signal 9 (SIGKILL))"), message
    assert "\n" not in message


def test_a_rank_refusing_its_input_is_an_input_error() -> None:
    """A ConfigError raised on a rank comes back as a ConfigError naming the rank."""
    with pytest.raises(ConfigError, match=r"^rank 1: comm-nice: setting nice -20 needs root$"):
        spawn(_rank_one_refuses, 2, (), OPTIONS)


def test_the_cli_prints_a_killed_rank_on_one_line(run_cli, monkeypatch) -> None:
    """``run dataparallel`` whose rank is killed: exit 1 and one line, no traceback."""
    spawn_module = importlib.import_module("dlsched.runtime.spawn")

    def killed(fn, world_size, args=(), options=None):  # the real spawn of a killed rank
        return spawn(_rank_one_is_killed, world_size, (), OPTIONS)

    monkeypatch.setattr(spawn_module, "spawn", killed)
    code, _, err = run_cli("run", "dataparallel", "--module", "resnet", "--workers", "2",
                           "--network", "ring:1Gb/s,20us", "--policy", "wfbp")
    assert code == 1, err
    errors = [line for line in err.strip().splitlines() if not line.startswith("note: ")]
    assert len(errors) == 1 and "Traceback" not in err
    assert "rank 1 failed (killed by signal 9 (SIGKILL))" in err
