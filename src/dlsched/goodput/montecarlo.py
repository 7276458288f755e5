"""Seeded Monte-Carlo simulation of the failure, checkpoint and restart process of
``goodput.failures`` (seconds): the check of its closed forms.

Each run computes ``segments`` segments of ``interval`` seconds, each followed by a checkpoint
that blocks ``cost`` seconds. Job failures are exponential with mean ``mtbf``; a failure in a
segment (or its checkpoint) rolls back to the last durable checkpoint and costs ``restart``
seconds, during which the job can fail again (Daly 2006's process). With ``durable_delay`` W > 0
(asynchronous checkpoints) a checkpoint becomes durable only W seconds after its snapshot ends: a
failure before that rolls back one checkpoint further, the exact process the closed form prices
to first order. All runs advance together, one event per run per step (numpy), so a run's cost is
its segments plus its failures.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlsched.errors import ConfigError

Z99 = 2.5758293035489  # two-sided 99% standard normal quantile


@dataclass(frozen=True)
class Simulated:
    """Sample means over ``runs`` and their 99% confidence half-widths (normal approximation of
    the mean): wall seconds and interruptions per run."""

    runs: int
    wall_s: float
    wall_half_width: float
    interruptions: float
    interruptions_half_width: float

    def wall_interval(self) -> tuple[float, float]:
        """The 99% confidence interval of the mean wall seconds."""
        return self.wall_s - self.wall_half_width, self.wall_s + self.wall_half_width


def simulate(segments: int, interval: float, cost: float, restart: float, mtbf: float,
             runs: int = 2000, seed: int = 0, durable_delay: float = 0.0) -> Simulated:
    """Simulate ``runs`` jobs (module docstring) with a ``numpy`` generator seeded by ``seed``."""
    if segments < 1 or runs < 2:
        raise ConfigError("segments and runs: accepted: segments >= 1, runs >= 2")
    if durable_delay > interval + cost:
        raise ConfigError(f"durable_delay: {durable_delay} s is not accepted; accepted: at most "
                          "the interval plus the checkpoint cost (one write in flight)")
    rng = np.random.default_rng(seed)
    now = np.zeros(runs)
    completed = np.zeros(runs, dtype=np.int64)  # segments whose snapshot has ended
    durable = np.zeros(runs, dtype=np.int64)  # segments a restart resumes after
    pending = np.full(runs, np.inf)  # when the newest snapshot becomes durable
    restarting = np.zeros(runs, dtype=bool)
    failures = np.zeros(runs, dtype=np.int64)
    active = np.ones(runs, dtype=bool)
    while active.any():
        idx = np.flatnonzero(active)
        fail_at = now[idx] + rng.exponential(mtbf, idx.size)
        _restart_step(idx, fail_at, now, restarting, failures, restart)
        comp = idx[~restarting[idx]]
        comp_fail = fail_at[~restarting[idx]]
        _compute_step(comp, comp_fail, now, completed, durable, pending, restarting, failures,
                      interval + cost, durable_delay)
        active &= completed < segments
    return Simulated(runs, float(now.mean()), Z99 * float(now.std(ddof=1)) / np.sqrt(runs),
                     float(failures.mean()), Z99 * float(failures.std(ddof=1)) / np.sqrt(runs))


def _restart_step(idx: np.ndarray, fail_at: np.ndarray, now: np.ndarray,
                  restarting: np.ndarray, failures: np.ndarray, restart: float) -> None:
    """Runs restarting: done at ``now + restart`` unless they fail first (then restart again)."""
    rest = restarting[idx]
    ids, fails = idx[rest], fail_at[rest]
    ok = fails > now[ids] + restart
    now[ids[ok]] += restart
    restarting[ids[ok]] = False
    now[ids[~ok]] = fails[~ok]
    failures[ids[~ok]] += 1


def _compute_step(ids: np.ndarray, fails: np.ndarray, now: np.ndarray, completed: np.ndarray,
                  durable: np.ndarray, pending: np.ndarray, restarting: np.ndarray,
                  failures: np.ndarray, segment: float, delay: float) -> None:
    """Runs computing a segment and its checkpoint: it ends, or a failure rolls back."""
    end = now[ids] + segment
    ok = fails > end
    done, lost = ids[ok], ids[~ok]
    # a pending snapshot that became durable before the segment ended (or the failure)
    durable[done] = np.where(pending[done] <= end[ok], completed[done], durable[done])
    completed[done] += 1
    now[done] = end[ok]
    if delay > 0:
        pending[done] = end[ok] + delay
    else:
        durable[done] = completed[done]
    fail_now = fails[~ok]
    durable[lost] = np.where(pending[lost] <= fail_now, completed[lost], durable[lost])
    completed[lost] = durable[lost]
    pending[lost] = np.inf
    now[lost] = fail_now
    restarting[lost] = True
    failures[lost] += 1
