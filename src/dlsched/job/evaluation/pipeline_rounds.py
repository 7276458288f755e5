"""ZB-H1's replica walked round by round with every rank at once (numpy over the ranks), in
two lanes: the timing ``pipeline_walk.walk_pipeline`` gives each lane, without a Python step
per action; and GPipe's rank by rank with every microbatch at once (``gpipe_timings``).

ZB-H1's orders (``pipeline.plans.schedules.zb_h1_orders``: stage ``r`` on rank ``r``) are, on
every rank ``r``, rounds ``k = -(p - 1) .. m - 1`` of at most three actions:

    F(k + p - 1)   if k + p - 1 < m
    I(k + r)       if 0 <= k + r < m
    W(k)           if k >= 0

(``zb_h1_holds`` checks this against the orders themselves and the walk refuses any other).
In round ``k`` every rank runs the forward of the same microbatch, so a forward's input (the
activation of rank ``r - 1``) is made earlier in the same round: the forwards of a round are one
chain down the ranks, ``begin_r = max(v_r, begin_(r-1) + e_r)`` with ``v_r`` what rank ``r``
waits for apart from the chain (its own free time, its predecessor's send stream) and ``e_r``
the predecessor's forward plus its transfer, which is a running maximum:
``begin = E + cummax(v - E)`` (``E`` the running sum of ``e``). An input gradient ``I(k + r)``
waits for rank ``r + 1``'s ``I`` of the same microbatch, made in round ``k - 1`` (the last rank's
for its own forward of this round), and a weight gradient for nothing but its rank. Each rank
sends one transfer at a time, in its action order (its send stream, as the walk's). So a round
is a fixed handful of operations on vectors of ``p`` (per lane), whatever ``p`` is.

The steady rounds (``0 <= k <= m - p``: every rank runs all three) are one map of the state
(per lane and rank: free time, send stream, the gradient on its way), translated by the
microbatch; once a round's state is one of the previous ``MAX_CYCLE`` rounds' moved by one amount
per lane (a cycle), every later steady round is that cycle's moved again (a max-plus recurrence
invariant under translation; ``job.evaluation.pipeline_steady``'s argument), so the walk jumps
over the whole cycles left and walks the rest and the cool-down. ZB-H1 of a model whose last
stage is slower (the loss) settles only after hundreds of rounds (``BENCHMARKS.md``,
``plan-walk``), so most evaluations walk every round: the point of this walk is that a round
costs about 20 numpy operations, not ``3 p`` Python steps.

The sums are taken in another order than the walk's (the running sums ``E``), so the times
differ from the full walk's by floating-point rounding: ``tests/job/test_pipeline_rounds.py``
holds both lanes equal to ``walk_pipeline`` to 1e-9 on random replicas.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from dlsched.job.evaluation.pipeline_orders import coded_orders, periodic_orders
from dlsched.job.evaluation.pipeline_walk import PipelineTimes, ReplicaTiming

MAX_CYCLE = 8  # rounds a repeat may take (as pipeline_steady.MAX_CYCLE)
CHECK_EVERY = 4  # steady rounds between two searches for a repeat (each about 10 us)
TOLERANCE = 1e-12  # of the largest time: rounding in the comparison (pipeline_steady's)


@lru_cache(maxsize=128)
def zb_h1_holds(pp: int, num_microbatches: int) -> bool:
    """Whether ZB-H1's orders of ``num_microbatches`` on ``pp`` ranks are the rounds of the
    module docstring, action for action (kept per arguments). Past the orders' steady state
    (``pipeline_orders.periodic_orders``, read the same way) they are compared at its first two
    counts with a steady round (at least ``pp``): from there both the orders and the rounds grow
    by one round per microbatch, so two consecutive counts that agree make every larger count
    agree (a check whose cost does not grow with the microbatches); fewer are compared as they
    are."""
    structure = periodic_orders("zb-h1", pp, 1, num_microbatches)
    first = max(pp, structure.base) if structure is not None else num_microbatches
    if structure is None or structure.shift != 1 or num_microbatches <= first + 1:
        return _same_orders(pp, num_microbatches)
    return _same_orders(pp, first) and _same_orders(pp, first + 1)


def _same_orders(pp: int, m: int) -> bool:
    """Whether the orders of ``m`` microbatches are the rounds, action for action."""
    for r, order in enumerate(coded_orders("zb-h1", pp, 1, m)):
        expected = []
        for k in range(-(pp - 1), m):
            if k + pp - 1 < m:
                expected.append((r, 0, k + pp - 1))
            if 0 <= k + r < m:
                expected.append((r, 1, k + r))
            if k >= 0:
                expected.append((r, 2, k))
        if tuple(expected) != order:
            return False
    return True


class _Rounds:
    """The walk's state and constants, per lane (rows) and rank (columns); every operation of
    a round writes into these arrays or views of them, made once (no array is made per
    round: a numpy call costs about 1 us here, the round's arithmetic far less)."""

    def __init__(self, lanes: tuple[PipelineTimes, PipelineTimes]) -> None:
        pp = lanes[0].pp
        share = lanes[0].input_fraction
        self.pp = pp
        forward = np.array([t.forward for t in lanes])
        backward = [t.backward for t in lanes]
        # the walk's own products (pipeline_steady._Lanes.flat): I then W of each backward
        self.input = np.array([[b * share for b in lane] for lane in backward])
        self.weight = np.array([[b * (1 - share) for b in lane] for lane in backward])
        self.hop = np.array([t.send for t in lanes])  # boundary r: rank r to r + 1 and back
        # -inf where a boundary sends nothing (no transfer on the stream: it arrives at once)
        self.no_send = np.where(self.hop > 0, 0.0, -np.inf)
        # the forward chain: e_r = F_(r-1) + hop_(r-1), E its running sum (E_0 = 0)
        self.sums = np.zeros((2, pp))
        self.sums[:, 1:] = np.cumsum(forward[:, :-1] + self.hop, axis=1)
        self.stream_term = self.hop + self.no_send - self.sums[:, 1:]
        self.sums_forward = self.sums + forward
        self.streams = bool((self.hop > 0).any())  # none: no send stream to keep
        self.free, self.link, self.grad = np.zeros((2, pp)), np.zeros((2, pp)), np.zeros((2, pp))
        self.chain, self.ends = np.empty((2, pp)), np.empty((2, pp))
        self.begin_i, self.end_i = np.empty((2, pp)), np.empty((2, pp))
        self.sent = np.empty((2, pp - 1))
        # views: the senders of activations (ranks 0 .. p - 2) and of gradients (1 .. p - 1)
        self.link_down, self.link_up = self.link[:, :-1], self.link[:, 1:]
        self.chain_up, self.ends_down = self.chain[:, 1:], self.ends[:, :-1]
        self.end_up, self.grad_down = self.end_i[:, 1:], self.grad[:, :-1]
        self.grad_last, self.ends_last = self.grad[:, -1:], self.ends[:, -1:]

    def forwards(self) -> None:
        """Every rank's forward of the round (the chain down the ranks), then its send."""
        chain, sent = self.chain, self.sent
        np.subtract(self.free, self.sums, out=chain)
        if self.streams:
            np.add(self.link_down, self.stream_term, out=sent)
            np.maximum(self.chain_up, sent, out=self.chain_up)
        np.maximum.accumulate(chain, axis=1, out=chain)
        np.add(chain, self.sums_forward, out=self.ends)
        if not self.streams:
            return
        # the activation leaves on the stream after the transfers before it; with no transfer
        # the stream is not used, and max(stream, end) is what it is for every later send
        np.maximum(self.link_down, self.ends_down, out=self.link_down)
        self.link_down += self.hop

    def inputs(self, low: int = 0, high: int | None = None) -> None:
        """Input gradients of ranks ``low .. high - 1`` (every rank when not given) after the
        round's forwards (``ends``), then their sends (the next round's ``grad``)."""
        pp = self.pp
        high = pp if high is None else high
        ends, end, link, sent = self.ends, self.end_i, self.link, self.sent
        np.copyto(self.grad_last, self.ends_last)  # the last stage's I: its own forward
        np.maximum(ends, self.grad, out=self.begin_i)
        np.add(self.begin_i, self.input, out=end)
        if low > 0 or high < pp:  # ranks without an I this round: as they were
            end[:, :low] = ends[:, :low]
            end[:, high:] = ends[:, high:]
        first = max(low, 1)
        if not self.streams:  # every gradient arrives as it is made
            if first == 1 and high == pp:
                np.copyto(self.grad_down, self.end_up)
            elif first < high:
                self.grad[:, first - 1:high - 1] = end[:, first:high]
            return
        np.add(self.link_up, self.no_send, out=sent)
        np.maximum(sent, self.end_up, out=sent)
        if first == 1 and high == pp:
            np.add(sent, self.hop, out=self.grad_down)
            np.maximum(self.link_up, sent, out=self.link_up)
            self.link_up += self.hop
        elif first < high:
            part = slice(first - 1, high - 1)
            self.grad[:, part] = sent[:, part] + self.hop[:, part]
            link[:, first:high] = np.maximum(link[:, first:high], sent[:, part]) + \
                self.hop[:, part]

    def state(self) -> np.ndarray:
        """What a steady round reads (per lane: free, send stream, gradients on their way)."""
        return np.concatenate((self.free, np.maximum(self.link, self.free), self.grad_down),
                              axis=1)

    def translate(self, moved: np.ndarray) -> None:
        """Move the state later by ``moved`` (per lane)."""
        column = moved[:, None]
        np.maximum(self.link, self.free, out=self.link)
        self.free += column
        self.link += column
        self.grad += column


def zb_h1_timings(times: PipelineTimes,
                  quiet: PipelineTimes) -> tuple[ReplicaTiming, ReplicaTiming] | None:
    """Both lanes' timing (module docstring); None when the orders are not ZB-H1's rounds
    (another schedule, chunks, fewer than two ranks)."""
    pp, m = times.pp, times.num_microbatches
    if times.schedule != "zb-h1" or times.chunks != 1 or pp < 2 or not zb_h1_holds(pp, m):
        return None
    walk = _Rounds((times, quiet))
    steady_end = m - pp  # the last round in which every rank runs F, I and W
    frees = np.empty((MAX_CYCLE + 1, 2, pp))  # the last rounds' free times, by round
    candidate: tuple[int, int, np.ndarray] | None = None  # (cycle, its end round, state)
    k = -(pp - 1)
    while k < m:
        if 0 <= k <= steady_end:
            walk.forwards()
            walk.inputs()
            np.add(walk.end_i, walk.weight, out=walk.free)
            np.copyto(frees[k % (MAX_CYCLE + 1)], walk.free)
            if candidate is not None and k == candidate[1]:
                jump, candidate = _confirmed(candidate, walk.state()), None
                if jump is not None:
                    cycle, moved = jump
                    whole = (steady_end - k) // cycle
                    walk.translate(whole * moved)
                    k += whole * cycle
            elif candidate is None and k % CHECK_EVERY == 0 and MAX_CYCLE <= k < steady_end:
                cycle = _free_repeat(frees, k % (MAX_CYCLE + 1))
                if cycle is not None:  # the free times repeat: the whole state, c rounds on?
                    candidate = (cycle, k + cycle, walk.state())
            k += 1
            continue
        if k + pp - 1 < m:
            walk.forwards()
        else:
            walk.ends[:] = walk.free
        walk.inputs(max(0, -k), min(pp, m - k))
        if k >= 0:
            np.add(walk.end_i, walk.weight, out=walk.free)
        else:
            walk.free[:] = walk.end_i
        k += 1
    # the last round runs a W on every rank: its start (the I's end) and end are the last
    # backward of each rank
    return tuple(ReplicaTiming(tuple(walk.end_i[lane].tolist()),
                               tuple(walk.free[lane].tolist()), float(walk.free[lane].max()))
                 for lane in range(2))


def _free_repeat(frees: np.ndarray, now: int) -> int | None:
    """The fewest rounds ``c`` (1 .. ``MAX_CYCLE``) after which every rank's free time has
    moved by one amount per lane (``frees``: the last rounds' by round modulo its length,
    ``now`` the last's index); None when none has."""
    size = len(frees)
    moved = frees[now] - frees
    spread = moved.max(axis=2) - moved.min(axis=2)
    scale = np.abs(frees[now]).max(axis=1) * TOLERANCE
    flat = np.all(spread <= scale, axis=1).tolist()
    for cycle in range(1, size):
        if flat[(now - cycle) % size]:
            return cycle
    return None


def _confirmed(candidate: tuple[int, int, np.ndarray],
               state: np.ndarray) -> tuple[int, np.ndarray] | None:
    """(rounds per repeat, seconds per repeat per lane) when ``state`` is the candidate's
    state ``cycle`` rounds earlier moved by one amount per lane, else None."""
    cycle, _, earlier = candidate
    moved = state - earlier
    scale = np.abs(state).max(axis=1) * TOLERANCE
    if np.all(moved.max(axis=1) - moved.min(axis=1) <= scale):
        return cycle, moved[:, 0].copy()
    return None


@lru_cache(maxsize=128)
def gpipe_holds(pp: int, num_microbatches: int) -> bool:
    """Whether GPipe's orders on ``pp`` ranks are every forward, then every backward, each in
    microbatch order (stage ``r`` on rank ``r``; kept per arguments)."""
    m = num_microbatches
    return all(order == tuple((r, 0, j) for j in range(m)) + tuple((r, 1, j) for j in range(m))
               for r, order in enumerate(coded_orders("gpipe", pp, 1, m)))


def gpipe_timings(times: PipelineTimes,
                  quiet: PipelineTimes) -> tuple[ReplicaTiming, ReplicaTiming] | None:
    """Both lanes' timing of a GPipe replica, rank by rank with every microbatch at once; None
    for other orders. Rank ``r`` waits only for rank ``r - 1`` in its forwards and for rank
    ``r + 1`` (the last rank: its own forward) in its backwards, so the forwards are walked
    down the ranks and the backwards up, each rank's whole sequence at once: a rank that runs
    actions of ``d`` seconds from free time ``t_0``, each when its input ``a_j`` has come,
    ends action ``j`` at ``C_j + max(t_0, max_(l <= j)(a_l - C_(l-1)))`` (``C`` the running
    sum of ``d``), a running maximum; its send stream (one transfer at a time, after the
    transfers before it) is the same recurrence over the ends."""
    pp, m = times.pp, times.num_microbatches
    if times.schedule != "gpipe" or times.chunks != 1 or pp < 2 or not gpipe_holds(pp, m):
        return None
    lanes = (times, quiet)
    forward = np.array([t.forward for t in lanes])
    backward = np.array([t.backward for t in lanes])
    hop = np.array([t.send for t in lanes])
    ones = np.ones(m)
    arrival = np.full((2, m), -np.inf)  # the first stage's forwards wait for nothing
    forward_ends, streams = [], []
    for r in range(pp):
        ends = _running(forward[:, r:r + 1] * ones, arrival, np.zeros((2, 1)))[1]
        forward_ends.append(ends)
        if r < pp - 1:
            arrival, stream = _sent(ends, hop[:, r:r + 1] * ones, np.zeros((2, 1)))
            streams.append(stream)
        else:
            arrival = ends  # the last stage's backward waits for its own forward
    starts, last_ends = np.empty((2, pp)), np.empty((2, pp))
    for r in range(pp - 1, -1, -1):
        begin, ends = _running(backward[:, r:r + 1] * ones, arrival,
                               forward_ends[r][:, -1:])
        starts[:, r], last_ends[:, r] = begin[:, -1], ends[:, -1]
        if r > 0:
            arrival = _sent(ends, hop[:, r - 1:r] * ones, streams[r][:, None]
                            if r < pp - 1 else np.zeros((2, 1)))[0]
    return tuple(ReplicaTiming(tuple(starts[lane].tolist()), tuple(last_ends[lane].tolist()),
                               float(last_ends[lane].max())) for lane in range(2))


def _running(seconds: np.ndarray, arrival: np.ndarray,
             free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Starts and ends of a rank's actions of ``seconds`` (per lane and action), each when
    the rank is free (from ``free`` on) and its input has come (``arrival``)."""
    total = np.cumsum(seconds, axis=1)
    before = total - seconds
    waited = arrival - before
    np.maximum(waited[:, :1], free, out=waited[:, :1])
    np.maximum.accumulate(waited, axis=1, out=waited)
    begin = before + waited
    return begin, begin + seconds


def _sent(ends: np.ndarray, seconds: np.ndarray,
          stream: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Arrivals of outputs made at ``ends`` sent one at a time on a stream free from
    ``stream`` (``seconds`` each; a lane that sends nothing, 0 seconds, has them at once), and
    the stream after the last (per lane)."""
    if not (seconds[:, 0] > 0).any():  # neither lane sends on the stream: they come at once
        return ends, stream[:, 0]
    arrival = _running(seconds, ends, stream)[1]
    sends = seconds[:, :1] > 0
    return np.where(sends, arrival, ends), np.where(sends[:, 0], arrival[:, -1], stream[:, 0])
