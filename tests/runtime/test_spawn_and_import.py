"""The runtime's process plumbing: lazy torch import, spawned ranks, failures never hang."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dlsched.runtime.spawn import RankFailure, SpawnOptions, spawn


def test_import_dlsched_does_not_import_torch() -> None:
    """``import dlsched`` (and the CLI, and dlsched.runtime itself) never loads torch."""
    code = ("import sys, dlsched, dlsched.cli.app, dlsched.runtime; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.stdout.strip() == "False"


def _sum_ranks(rank: int, world_size: int, scale: float) -> float:
    import torch
    import torch.distributed as dist

    value = torch.tensor([float(rank + 1) * scale])
    dist.all_reduce(value)
    return float(value.item())


def _die_on_rank_one(rank: int, world_size: int) -> None:
    import torch
    import torch.distributed as dist

    if rank == 1:
        os._exit(3)
    dist.all_reduce(torch.ones(4))


def test_spawned_ranks_all_reduce_and_return_results() -> None:
    """Two gloo ranks sum 1 and 2 (times 1.5): both return 4.5."""
    assert spawn(_sum_ranks, 2, (1.5,), SpawnOptions(timeout_s=60)) == [4.5, 4.5]


def test_dead_rank_fails_the_run_instead_of_hanging() -> None:
    """Rank 1 exits mid-run: RankFailure names it, well before the deadline."""
    with pytest.raises(RankFailure, match=r"rank 1 failed \(exit code 3\)"):
        spawn(_die_on_rank_one, 2, (), SpawnOptions(timeout_s=20, grace_s=5, deadline_s=120))
