"""Execute a pipeline plan on the device graph and produce the common Timeline.

Compute runs one action at a time per GPU. An activation (after F) or gradient (after B or I)
that crosses GPUs goes through the network model (``pipeline.network``: links inside servers,
per-GPU NIC egress/ingress shared by everything crossing servers, FIFO per stream or processor
sharing, ``PipelineProblem.network``). When every microbatch's backward of a replicated stage is
done, its replicas run a ring all-reduce of the stage's gradients through the same network:
``2(r-1)`` steps, in each every replica sends ``1/r`` of the gradients to the next one, a step
ending when its last transfer does (alone on the network this takes exactly
``PipelineProblem.allreduce_time``); a plan with ``ddp_buckets`` instead all-reduces each
stage's DDP buckets (``pipeline.ddp``) one after another, each once every replica's last
backward has produced its gradients. The iteration ends at the barrier: the last compute,
transfer or all-reduce. Two ways to pick each GPU's next action:

* a fixed order (the plan's ``orders``): the GPU waits for its next action's inputs;
* list scheduling (``Dispatch``): the GPU runs the ready action of best priority, subject to a
  per-stage in-flight cap and its memory; the executed orders become a fixed plan.

A simulation given a ``deadline`` (seconds) stops with ``Late`` as soon as some compute,
transfer or all-reduce ends after it, or a GPU starts an action at a time that, plus the
compute it still runs and what must follow its last action (``bounds.drain_after``), passes
it: the iteration would end later still, so a planner that only keeps plans faster than the
deadline (``pruning``) loses nothing (a list schedule that would stall may be Late instead).
The timeline's spans are built when first read (``SimResult.timeline``): planners read only
the time.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from weakref import WeakKeyDictionary

from dlsched.hardware.device_graph import DeviceGraph
from dlsched.pipeline.chains.problem import PipelineProblem
from dlsched.pipeline.plans.actions import Action
from dlsched.pipeline.plans.checks import check_plan, check_split, deadlock_error
from dlsched.pipeline.plans.deadlock import parts_from
from dlsched.pipeline.plans.plan import (
    PipelinePlan,
    PlanError,
    Stage,
    grid,
    overlap,
    validate_stages,
)
from dlsched.pipeline.plans.units import next_unit
from dlsched.pipeline.simulation.action_times import ActionTimes
from dlsched.pipeline.simulation.bounds import drain_after
from dlsched.pipeline.simulation.chain_numbers import chain_numbers
from dlsched.pipeline.simulation.ddp import ddp_buckets
from dlsched.pipeline.simulation.memory import action_stash, static_memory
from dlsched.pipeline.simulation.network import PipelineNetwork
from dlsched.pipeline.simulation.sim_result import (
    Late,
    SimResult,
    SpanRecord,
    compute_span,
    link_span,
    sync_span,
)
from dlsched.sim import Engine, Span
from dlsched.sim.collective_cost import ring_allreduce_steps

# Relative slack of the early Late (``_Run._bound_end``) over the rounding of sums of seconds.
BOUND_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Dispatch:
    """A list-scheduling rule: ``priority(action)`` (smaller runs first), ``caps[s]`` the most
    microbatches of stage ``s`` a GPU may have between their F and their B (or I), ``split``
    I/W backwards; ``inputs`` what ``priority`` reads besides the action (with ``name``,
    they identify the rule: ``list_schedule`` keeps results by them). Memory is checked
    separately: activations stay until B (or W)."""

    name: str
    priority: Callable[[Action], tuple]
    caps: tuple[int, ...]
    split: bool
    inputs: tuple = ()


class _Run:
    """State of one simulation (see the module docstring)."""

    def __init__(self, problem: PipelineProblem, stages: tuple[Stage, ...],
                 orders: tuple[tuple[Action, ...], ...] | None, dispatch: Dispatch | None,
                 bucketed: bool = False, deadline: float = math.inf,
                 joined: tuple[frozenset[int], ...] = ()):
        self.problem, self.stages, self.dispatch = problem, stages, dispatch
        self.deadline, self.end = deadline, 0.0
        check_split(problem, stages)
        self.engine = Engine()
        n = problem.graph.num_devices
        self.split = dispatch.split if dispatch else any(
            a.kind == "I" for order in orders for a in order)
        self.orders, self.joined = orders, joined
        self.pointer = [0] * n
        self.executed: list[list[Action]] = [[] for _ in range(n)]
        self.ready: list[set[Action]] = [set() for _ in range(n)]
        self.heaps: list[list] = [[] for _ in range(n)]
        self.busy = [False] * n
        self.busy_s = [0.0] * n
        self.static = static_memory(problem.chain, stages, n)
        self.memory = list(self.static)
        self.peak = list(self.static)
        self.in_flight: dict[tuple[int, int], int] = {}
        self.backward_done = [0] * len(stages)
        self.network = PipelineNetwork(self.engine, problem.graph, problem.network)
        self.records: list[SpanRecord] = []
        self.names = [device.name for device in problem.graph.devices]
        self.action_times = ActionTimes(problem, stages)
        self.stash = [action_stash(problem.chain, st) for st in stages]
        self.expected: dict[tuple[Action, int], int] = {}
        self.parts: dict[tuple[int, int, int], int] = {}  # parts_from per stages and replica
        self.total = self._total_actions()
        self.buckets = {s: ddp_buckets(problem.chain, st.first, st.last)
                        for s, st in enumerate(stages) if bucketed and len(st.devices) > 1}
        self.gradients_left = {
            (d, s): len(mine) for s in self.buckets for d, mine in zip(
                stages[s].devices, stages[s].replica_microbatches(problem.num_microbatches),
                strict=True)}
        self.bucket_ready = {s: [0] * len(b) for s, b in self.buckets.items()}
        self.bucket_next = dict.fromkeys(self.buckets, 0)
        self.reducing: set[int] = set()
        self.work_left = self._work_left(bucketed) if math.isfinite(deadline) else None

    def _total_actions(self) -> int:
        per = 3 if self.split else 2
        return per * sum(st.parts for st in self.stages) * self.problem.num_microbatches

    def run(self) -> None:
        try:
            self._release_first()
            self.engine.run()
        except Late:  # the pending events and transfers refer back to this run: dropped, it
            self.engine.clear()  # is freed at once, not left as cyclic garbage (collection)
            self.network.links.clear()
            raise
        if sum(len(e) for e in self.executed) != self.total:
            self._deadlock()

    def _release_first(self) -> None:
        """Make stage 0's forwards ready, and the buckets of replicas that run no microbatch."""
        for (_, s), left in self.gradients_left.items():
            for k in range(len(self.buckets[s]) if left == 0 else 0):
                self.engine.after(0.0, self._ready, s, k)  # a replica with no microbatch
        for j in range(self.problem.num_microbatches):
            for device in self.stages[0].devices_for(j):
                self._make_ready(Action(0, "F", j), device)

    def _record(self, make: Callable[..., Span], *args: object) -> None:
        """Keep a span ending now (``make(*args)``); Late when now is past the deadline."""
        now = self.engine.now
        if now > self.deadline:
            raise Late
        if now > self.end:
            self.end = now
        self.records.append((make, args))

    def _make_ready(self, action: Action, device: int) -> None:
        self.ready[device].add(action)
        if self.dispatch is not None:
            heapq.heappush(self.heaps[device], (self.dispatch.priority(action), action))
        self._try_start(device)

    def _pick(self, device: int) -> tuple[Action, ...]:
        """The unit to start next on ``device`` (one action unless ``joined``), or ``()``."""
        if self.dispatch is None:
            order, pointer = self.orders[device], self.pointer[device]
            if self.joined:
                unit = next_unit(order, pointer, self.joined[device],
                                 self.ready[device].__contains__)
            elif pointer < len(order) and order[pointer] in self.ready[device]:
                unit = (order[pointer],)
            else:
                return ()
            self.pointer[device] += len(unit)
            return unit
        heap, blocked, chosen = self.heaps[device], [], None
        while heap:
            entry = heapq.heappop(heap)
            if entry[1].kind == "F" and not self._fits(device, entry[1]):
                blocked.append(entry)
                continue
            chosen = entry[1]
            break
        for entry in blocked:
            heapq.heappush(heap, entry)
        return () if chosen is None else (chosen,)

    def _fits(self, device: int, action: Action) -> bool:
        count = self.in_flight.get((device, action.stage), 0)
        budget = self.problem.graph.devices[device].memory
        return (count < self.dispatch.caps[action.stage]
                and self.memory[device] + self.stash[action.stage] <= budget)

    def _try_start(self, device: int) -> None:
        if self.busy[device]:
            return
        unit = self._pick(device)
        if not unit:
            return
        self.busy[device] = True
        total = 0.0
        for action in unit:
            self.ready[device].discard(action)
            if action.kind == "F":
                key = (device, action.stage)
                self.in_flight[key] = self.in_flight.get(key, 0) + 1
                self.memory[device] += self.stash[action.stage]
                self.peak[device] = max(self.peak[device], self.memory[device])
            duration = self.action_times.duration(action, device)
            if self.work_left is not None:
                self._bound_end(device, action)
            if action.frees and action.stage in self.buckets:
                self._last_gradients(device, action.stage, duration)
            total += duration
        total = self.action_times.overlapped(unit, total) if len(unit) > 1 else total
        self.engine.after(total, self._finish, device, unit, self.engine.now)

    def _last_gradients(self, device: int, s: int, duration: float) -> None:
        """Count a gradient action of ``device`` on stage ``s``; when it is the replica's last,
        each DDP bucket becomes ready on it at its fraction of this action."""
        self.gradients_left[(device, s)] -= 1
        if self.gradients_left[(device, s)] == 0:
            for k, (_, fraction) in enumerate(self.buckets[s]):
                self.engine.after(fraction * duration, self._ready, s, k)

    def _ready(self, s: int, k: int) -> None:
        self.bucket_ready[s][k] += 1
        self._next_bucket(s)

    def _next_bucket(self, s: int) -> None:
        """Start stage ``s``'s next bucket once every replica has it and the previous one is
        reduced (one communication stream)."""
        k = self.bucket_next[s]
        replicas = len(self.stages[s].devices)
        if s in self.reducing or k == len(self.buckets[s]) or self.bucket_ready[s][k] < replicas:
            return
        self.reducing.add(s)

        def reduced() -> None:
            self.reducing.discard(s)
            self.bucket_next[s] += 1
            self._next_bucket(s)

        self._ring_step(s, ring_allreduce_steps(replicas), self.buckets[s][k][0] / replicas,
                        self.engine.now, f"all-reduce stage {s} bucket {k}", reduced)

    def _work_left(self, bucketed: bool) -> list[float] | None:
        """Per GPU, seconds of compute of its actions + ``drain_after`` (None: ``work``'s)."""
        work = self.action_times.work(self.problem.num_microbatches, self.split)
        if work is None:
            return None
        drain = drain_after(self.problem, self.stages, self.split, bucketed)
        return [seconds + after for seconds, after in zip(work, drain, strict=True)]

    def _bound_end(self, device: int, action: Action) -> None:
        """Late when ``device``, starting ``action`` now, cannot end the iteration by the
        deadline with the ``work_left`` seconds of compute it runs one at a time and what must
        follow (the simulation would pass it later; ``BOUND_TOLERANCE``: sums' rounding)."""
        left = self.work_left[device]
        if self.engine.now + left > self.deadline * (1 + BOUND_TOLERANCE):
            raise Late
        self.work_left[device] = left - self.action_times.compute(action.stage, action.kind,
                                                                  device)

    def _finish(self, device: int, unit: tuple[Action, ...], start: float) -> None:
        """End ``unit`` (its actions' spans one after another), then send its outputs."""
        now = self.engine.now
        for action, begin, end in self.action_times.spans(unit, device, start, now):
            self._record(compute_span, self.names[device], begin, end, action)
        self.busy_s[device] += now - start
        self.busy[device] = False
        self.executed[device].extend(unit)
        for action in unit:
            self._consequences(device, action)
        self._try_start(device)

    def _consequences(self, device: int, action: Action) -> None:
        s, j, last = action.stage, action.microbatch, len(self.stages) - 1
        backward = "I" if self.split else "B"
        chain = self.problem.chain
        if action.kind == "F":
            if s == last:
                self._make_ready(Action(s, backward, j), device)
            else:
                self._send(device, Action(s + 1, "F", j),
                           chain.activation_bytes[self.stages[s].last - 1], "activation")
        if action.kind in ("B", "I") and s > 0:
            self._send(device, Action(s - 1, backward, j),
                       chain.activation_bytes[self.stages[s - 1].last - 1], "gradient")
        if action.kind == "I":
            self._make_ready(Action(s, "W", j), device)
        if action.is_backward:
            self.in_flight[(device, s)] -= 1
        if action.frees:
            self._release(device, action)

    def _release(self, device: int, action: Action) -> None:
        self.memory[device] -= self.stash[action.stage]
        self.backward_done[action.stage] += 1
        if self.backward_done[action.stage] == (self.problem.num_microbatches
                                                * self.stages[action.stage].parts) \
                and action.stage not in self.buckets:
            self._sync(action.stage)

    def _send(self, src: int, target: Action, num_bytes: float, kind: str) -> None:
        """``src``'s output for ``target``: to each replica of the target stage whose part of
        the microbatch overlaps ``src``'s part, that overlap's share of ``num_bytes``; the
        target is ready on a replica once every overlapping part has arrived."""
        s = target.stage + (1 if kind == "gradient" else -1)
        source, receiving = self.stages[s], self.stages[target.stage]
        if not (source.split or receiving.split):  # one receiver, one part: all of it
            self._deliver(src, receiving.device_for(target.microbatch), target, num_bytes,
                          kind, None)
            return
        mine = source.part(src)
        for dst in receiving.devices_for(target.microbatch):
            share = overlap(mine, receiving.part(dst))
            if share > 0:
                self._deliver(src, dst, target, num_bytes * share, kind, s)

    def _deliver(self, src: int, dst: int, target: Action, num_bytes: float, kind: str,
                 source: int | None) -> None:
        """Move one part for ``target`` to ``dst``; stage ``source`` (None when neither it
        nor the target stage is split: then this is the only part) tells how many parts
        ``dst`` waits for (``parts_from``)."""
        key = (target, dst)
        if source is not None and key not in self.expected:
            parts = (source, target.stage, dst)
            if parts not in self.parts:
                self.parts[parts] = parts_from(self.stages, *parts)
            self.expected[key] = self.parts[parts]

        def arrived() -> None:
            if src != dst:
                self._record(link_span, src, dst, start, self.engine.now, kind, target,
                             num_bytes)
            if source is not None:
                self.expected[key] -= 1
                if self.expected[key]:
                    return
            self._make_ready(target, dst)

        start = self.engine.now
        if src == dst:
            arrived()
        else:
            self.network.send(src, dst, num_bytes, ("p2p", src), arrived)

    def _sync(self, s: int) -> None:
        stage = self.stages[s]
        r = len(stage.devices)
        if r == 1:
            return
        size = float(self.problem.chain.param_bytes[stage.first:stage.last].sum()) / r
        self._ring_step(s, ring_allreduce_steps(r), size, self.engine.now, f"all-reduce stage {s}")

    def _ring_step(self, s: int, steps_left: int, size: float, start: float, label: str,
                   on_done: Callable[[], None] | None = None) -> None:
        """One step of a ring all-reduce over stage ``s``'s replicas: every replica sends
        ``size`` bytes to the next; the next step starts when all have arrived; after the
        last, ``on_done()``."""
        devices = self.stages[s].devices
        if steps_left == 0:
            for device in devices:
                self._record(sync_span, self.names[device], start, self.engine.now, label, s)
            if on_done is not None:
                on_done()
            return
        pending = [len(devices)]

        def arrived() -> None:
            pending[0] -= 1
            if pending[0] == 0:
                self._ring_step(s, steps_left - 1, size, start, label, on_done)

        self.network.send_each([(device, devices[(i + 1) % len(devices)], size,
                                 ("allreduce", device), arrived)
                                for i, device in enumerate(devices)])

    def _deadlock(self) -> None:
        if self.orders is None:
            executed = tuple(map(tuple, self.executed))
            raise PlanError("list scheduling stalled: in-flight caps or memory leave no ready "
                            f"action runnable; executed so far:\n{grid(executed)}")
        stuck = next(k for k, order in enumerate(self.orders) if self.pointer[k] < len(order))
        raise deadlock_error(self.orders, stuck, self.pointer[stuck])


# Simulated results kept per device graph of a planning instance (``PipelineProblem.root``'s:
# all its TP degrees and recomputation modes, and instances that differ only in what planners
# may choose, e.g. ``runnable_only``), so that a plan scored again (by dlsched among its
# candidates, by ``run_planner``, by a grid point whose recomputation mode leaves the chain's
# numbers as they are, by a second search keeping to runnable plans) is not simulated twice.
# The key is what a simulation reads besides the graph: the network mode, the TP degree, the
# chain's numbers (``chain_numbers``) and the plan's stages, orders, units and gradient sync (or,
# for list scheduling, the stages and the rule).
_KEPT: WeakKeyDictionary[DeviceGraph, dict[tuple, SimResult]] = WeakKeyDictionary()
_LATE: WeakKeyDictionary[DeviceGraph, dict[tuple, float]] = WeakKeyDictionary()


def _plan_key(problem: PipelineProblem, plan: PipelinePlan) -> tuple:
    """What simulating ``plan`` on ``problem`` (the instance it runs on) depends on."""
    return (problem.network, problem.degree, chain_numbers(problem.chain), plan.stages,
            plan.orders, plan.num_microbatches, plan.ddp_buckets, plan.joined)


def _kept(instance: PipelineProblem) -> dict[tuple, SimResult]:
    """The results kept for ``instance``'s planning instance (see ``_KEPT``)."""
    return _KEPT.setdefault(instance.root.graph, {})


def _late(instance: PipelineProblem) -> dict[tuple, float]:
    """Per plan key (``_plan_key``) or list-scheduling key, the latest deadline (seconds) a
    simulation on ``instance``'s planning instance passed."""
    return _LATE.setdefault(instance.root.graph, {})


def remember(problem: PipelineProblem, result: SimResult) -> None:
    """Keep ``result`` so that ``simulate`` of the same plan on ``problem`` returns it."""
    instance = problem.for_plan(result.plan)
    _kept(instance)[_plan_key(instance, result.plan)] = result


def simulate(problem: PipelineProblem, plan: PipelinePlan,
             deadline: float = math.inf) -> SimResult:
    """Run ``plan`` (fixed per-GPU orders) and return its timeline (times in seconds).

    The plan is validated first; a plan whose peak memory exceeds a GPU's is refused with a
    ConfigError naming the GPU and the shortfall. The chain runs under the plan's
    recomputation mode and tensor-parallel degree. A result kept by ``remember`` is returned
    without simulating again (with ``plan`` as its plan); every result is kept. Late when
    the iteration ends after ``deadline`` seconds (found as soon as the simulated clock
    passes it; a result kept already is returned whatever its time); the latest deadline
    the plan passed is kept too (``_LATE``): Late again at once for any deadline up to it."""
    instance = problem.for_plan(plan)
    key = _plan_key(instance, plan)
    kept = _kept(instance).get(key)
    if kept is not None:
        return replace(kept, plan=plan)
    late = _late(instance)
    if deadline <= late.get(key, -math.inf):
        raise Late
    problem = check_plan(problem, plan, deadlock=False)
    run = _Run(problem, plan.stages, plan.orders, None, plan.ddp_buckets, deadline, plan.joined)
    try:
        run.run()
    except Late:
        late[key] = deadline
        raise
    result = _result(run, plan)
    _kept(instance)[key] = result
    return result


def list_schedule(problem: PipelineProblem, stages: tuple[Stage, ...], dispatch: Dispatch,
                  planner: str, deadline: float = math.inf) -> SimResult:
    """List-schedule ``stages`` with ``dispatch`` and return the simulated result; its plan
    holds the executed orders (and the chain's recomputation mode and the instance's
    tensor-parallel degree), so ``simulate`` of that
    plan reproduces the same timeline. PlanError when ``stages`` are no valid partition
    (``validate_stages``: e.g. a stage listing one GPU twice); Late when the iteration ends
    after ``deadline`` seconds. Results are kept (``_KEPT``, by the rule's name, inputs, caps
    and split) and returned again whatever the deadline; so is the latest deadline a run
    passed (``_LATE``): it is Late again at once for any deadline up to that one."""
    key = (problem.network, problem.degree, chain_numbers(problem.chain),
           problem.num_microbatches, stages, dispatch.name, dispatch.inputs, dispatch.caps,
           dispatch.split)
    kept = _kept(problem)
    if key in kept:
        result = kept[key]
        return replace(result, plan=replace(result.plan, planner=planner))
    late = _late(problem)
    if deadline <= late.get(key, -math.inf):
        raise Late
    validate_stages(stages, problem.chain.num_blocks, problem.graph.num_devices)
    run = _Run(problem, stages, None, dispatch, deadline=deadline)
    try:
        run.run()
    except Late:
        late[key] = deadline
        raise
    orders = tuple(tuple(order) for order in run.executed)
    plan = PipelinePlan(planner, stages, orders, problem.num_microbatches,
                        {"schedule": dispatch.name}, problem.chain.recompute, problem.degree)
    kept[key] = _result(run, plan)
    return kept[key]


def _result(run: _Run, plan: PipelinePlan) -> SimResult:
    return SimResult(plan, run.end, tuple(run.peak), tuple(run.busy_s), tuple(run.records))
