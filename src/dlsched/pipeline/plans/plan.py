"""Pipeline plans: stages (layer ranges and their GPUs) plus per-GPU action orders.

A stage on ``r`` GPUs replicates its layers data-parallel: microbatch ``j`` runs on
``devices[j % r]`` (round-robin), or, for a ``split`` stage (DAPPLE), every microbatch is
split into ``r`` equal parts and replica ``k`` runs part ``k`` of every microbatch (samples
``k/r .. (k+1)/r``): its actions are 1/r of the stage's work and stash, and its activations go
to the replicas of the next stage whose parts overlap. One GPU may host several stages
(interleaved schedules). ``validate_plan``
is the one checker every planner's output goes through; its error prints the whole grid with the
failing action marked.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dlsched.errors import PlanError
from dlsched.pipeline.plans.actions import Action, format_orders


@dataclass(frozen=True)
class Stage:
    """Blocks ``first..last-1`` run on ``devices`` (several = data-parallel replicas, taking
    microbatches round-robin, or each a part of every microbatch when ``split``)."""

    first: int
    last: int
    devices: tuple[int, ...]
    split: bool = False

    def device_for(self, microbatch: int) -> int:
        """The replica that runs ``microbatch`` (round-robin; the first replica of a split
        stage)."""
        return self.devices[microbatch % len(self.devices)]

    def devices_for(self, microbatch: int) -> tuple[int, ...]:
        """The replicas that run (a part of) ``microbatch``."""
        return self.devices if self.split else (self.device_for(microbatch),)

    def microbatches_of(self, device: int, num_microbatches: int) -> list[int]:
        """The microbatches (their parts, on a split stage) replica ``device`` runs."""
        if self.split:
            return list(range(num_microbatches)) if device in self.devices else []
        r = len(self.devices)
        residues = [k for k, d in enumerate(self.devices) if d == device]
        if len(residues) < 2:
            return list(range(residues[0], num_microbatches, r)) if residues else []
        return [j for j in range(num_microbatches) if j % r in residues]

    def replica_microbatches(self, num_microbatches: int) -> list[list[int]]:
        """``microbatches_of`` each replica, in ``devices`` order (O(m) per replica)."""
        m, r = num_microbatches, len(self.devices)
        if len(set(self.devices)) < r:
            return [self.microbatches_of(device, m) for device in self.devices]
        return [list(range(m)) if self.split else list(range(k, m, r)) for k in range(r)]

    @property
    def share(self) -> float:
        """The part of a microbatch one action of this stage processes (1/r when split)."""
        return 1.0 / len(self.devices) if self.split else 1.0

    @property
    def parts(self) -> int:
        """Actions of each kind per microbatch: one per replica when split, else one."""
        return len(self.devices) if self.split else 1

    @property
    def lanes(self) -> int:
        """Microbatches the stage works on side by side: 1 when split, else its replicas."""
        return 1 if self.split else len(self.devices)

    def part(self, device: int) -> tuple[float, float]:
        """The samples (as fractions of a microbatch) ``device`` handles: (0, 1) unless
        split."""
        if not self.split:
            return 0.0, 1.0
        k, r = self.devices.index(device), len(self.devices)
        return k / r, (k + 1) / r


def overlap(sender: tuple[float, float], receiver: tuple[float, float]) -> float:
    """Fraction of a microbatch two parts have in common."""
    return max(0.0, min(sender[1], receiver[1]) - max(sender[0], receiver[0]))


def host_transfers(stages: tuple[Stage, ...], action: Action, device: int) -> int:
    """How many activations or gradients ``action`` on ``device`` receives from and sends to
    other GPUs: an F receives from the replicas of the stage before whose parts overlap its
    own and sends to those of the stage after; a B or I the other way round; a W none."""
    if action.kind == "W":
        return 0
    s, j = action.stage, action.microbatch
    mine = stages[s].part(device)
    count = 0
    for neighbour in (s - 1, s + 1):
        if 0 <= neighbour < len(stages):
            stage = stages[neighbour]
            count += sum(1 for d in stage.devices_for(j)
                         if d != device and overlap(stage.part(d), mine) > 0)
    return count


@dataclass(frozen=True)
class PipelinePlan:
    """A complete plan: ``orders[k]`` is GPU ``k``'s action order (empty when unused);
    ``recompute`` is the activation recomputation it runs with (none, selective, full);
    ``tensor_parallel`` its tensor-parallel degree: above 1, "GPU" ``k`` is the ``k``-th TP
    group of that many GPUs (``PipelineProblem.tensor``); ``ddp_buckets`` whether replicated
    stages all-reduce their gradients in DDP buckets overlapped with their last backward
    (``pipeline.ddp``; False: one all-reduce once every replica's backwards are done);
    ``joined[k]`` the positions ``i`` of GPU ``k``'s order whose action runs as one unit with
    the action at ``i + 1`` (empty: every action alone): the unit starts when all its inputs
    are there and sends its outputs when it ends, e.g. DualPipe's overlapped F & B pairs
    (``plans.dualpipe``)."""

    planner: str
    stages: tuple[Stage, ...]
    orders: tuple[tuple[Action, ...], ...]
    num_microbatches: int
    notes: dict = field(default_factory=dict, compare=False)
    recompute: str = "none"
    tensor_parallel: int = 1
    ddp_buckets: bool = False
    joined: tuple[frozenset[int], ...] = ()

    @property
    def num_stages(self) -> int:
        """Number of pipeline stages."""
        return len(self.stages)

    @property
    def split_backward(self) -> bool:
        """True when the schedule splits backwards into I and W."""
        return any(a.kind == "I" for order in self.orders for a in order)

    def schedule_text(self) -> str:
        """The per-GPU orders as text (see ``actions.format_orders``)."""
        return format_orders(self.orders)

    def stages_text(self) -> str:
        """One line per stage: blocks and GPUs (``split`` when replicas split microbatches)."""
        return "\n".join(f"stage {s}: blocks {st.first}..{st.last - 1} on GPUs "
                         f"{','.join(map(str, st.devices))}{' split' if st.split else ''}"
                         for s, st in enumerate(self.stages))


def grid(orders: tuple[tuple[Action, ...], ...], mark: tuple[int, int] | None = None) -> str:
    """The per-GPU grid; ``mark=(gpu, index)`` wraps that cell as ``>>2F0<<``."""
    lines = []
    for k, order in enumerate(orders):
        cells = [f">>{a}<<" if mark == (k, i) else str(a) for i, a in enumerate(order)]
        lines.append(f"gpu{k:<3}| " + " ".join(cells))
    return "\n".join(lines)


def _fail(plan: PipelinePlan, message: str, mark: tuple[int, int] | None = None) -> PlanError:
    return PlanError(f"invalid plan ({plan.planner}): {message}\n{grid(plan.orders, mark)}")


def stages_error(stages: tuple[Stage, ...], num_blocks: int, num_devices: int) -> str | None:
    """Why ``stages`` are no valid partition of ``num_blocks`` blocks over ``num_devices``
    GPUs (blocks covered in order, each stage non-empty, on distinct GPUs in range), or None."""
    expected = 0
    for s, stage in enumerate(stages):
        if stage.first != expected or stage.last <= stage.first:
            return (f"stage {s} covers blocks {stage.first}..{stage.last - 1}; stages must "
                    f"cover blocks 0..{num_blocks - 1} in order, each non-empty")
        bad = [d for d in stage.devices if not 0 <= d < num_devices]
        if not stage.devices or bad or len(set(stage.devices)) != len(stage.devices):
            return f"stage {s} devices {stage.devices}: need distinct GPUs in 0..{num_devices - 1}"
        expected = stage.last
    if expected != num_blocks:
        return f"stages end at block {expected - 1}, the model has {num_blocks}"
    return None


def validate_stages(stages: tuple[Stage, ...], num_blocks: int, num_devices: int) -> None:
    """PlanError when ``stages`` are no valid partition (``stages_error``)."""
    message = stages_error(stages, num_blocks, num_devices)
    if message is not None:
        raise PlanError(f"invalid stages: {message}")


def _check_stages(plan: PipelinePlan, num_blocks: int, num_devices: int) -> None:
    message = stages_error(plan.stages, num_blocks, num_devices)
    if message is not None:
        raise _fail(plan, message)
    if len(plan.orders) != num_devices:
        raise _fail(plan, f"{len(plan.orders)} GPU orders for {num_devices} GPUs")


def _required(plan: PipelinePlan, split: bool) -> dict[Action, tuple[int, ...]]:
    kinds = ("F", "I", "W") if split else ("F", "B")
    return {Action(s, kind, j): stage.devices_for(j)
            for s, stage in enumerate(plan.stages)
            for j in range(plan.num_microbatches) for kind in kinds}


def validate_plan(plan: PipelinePlan, num_blocks: int, num_devices: int) -> None:
    """Check a plan: stages cover the chain; each GPU runs exactly the actions of the
    microbatches it owns (its part of every microbatch on a split stage), each once; F before
    B/I and I before W on every GPU."""
    if plan.num_microbatches < 1:
        raise PlanError(f"num_microbatches: {plan.num_microbatches} must be >= 1")
    _check_stages(plan, num_blocks, num_devices)
    if plan.joined and (len(plan.joined) != len(plan.orders) or any(
            not 0 <= i < len(order) - 1 for links, order in zip(plan.joined, plan.orders,
                                                                strict=True)
            for i in links)):
        raise _fail(plan, "joined: one set per GPU of positions before its order's last action")
    split = plan.split_backward
    if _orders_valid(plan, split):
        return
    required = _required(plan, split)
    seen: set[tuple[Action, int]] = set()
    for k, order in enumerate(plan.orders):
        for i, action in enumerate(order):
            owners = required.get(action, ())
            if k not in owners or (action, k) in seen:
                why = ("appears twice" if (action, k) in seen else "is not this GPU's work"
                       if owners else "is not part of this plan (stage, kind or "
                       "microbatch out of range, or B mixed with I/W)")
                raise _fail(plan, f"gpu{k} action {action} {why}", (k, i))
            needs = _predecessor(action)
            if needs is not None and (needs, k) not in seen:
                raise _fail(plan, f"gpu{k} runs {action} before {needs}", (k, i))
            seen.add((action, k))
    missing = sorted(a for a, owners in required.items()
                     if any((a, k) not in seen for k in owners))
    if missing:
        raise _fail(plan, "missing actions: " + " ".join(map(str, missing[:12])))


def _orders_valid(plan: PipelinePlan, split: bool) -> bool:
    """Whether the orders pass ``validate_plan``'s checks (the stages being valid), found
    with plain tuples per GPU: its actions distinct, each of a kind of the plan on a stage it
    hosts for a microbatch (part) it runs, F before B/I and I before W, as many as it owns.
    False leaves the error to find to the full check."""
    m = plan.num_microbatches
    kinds = {"F": None, "I": "F", "W": "I"} if split else {"F": None, "B": "F"}
    owned: list[dict[int, frozenset[int]]] = [{} for _ in plan.orders]
    for s, stage in enumerate(plan.stages):
        for device, mine in zip(stage.devices, stage.replica_microbatches(m), strict=True):
            owned[device][s] = frozenset(mine)
    for k, order in enumerate(plan.orders):
        mine = owned[k]
        position = {(a.stage, a.kind, a.microbatch): i for i, a in enumerate(order)}
        if len(position) != len(order) or len(order) != len(kinds) * sum(map(len, mine.values())):
            return False
        for (s, kind, j), i in position.items():
            if kind not in kinds or j not in mine.get(s, ()):
                return False
            needs = kinds[kind]
            if needs is not None and position.get((s, needs, j), i) >= i:
                return False
    return True


def _predecessor(action: Action) -> Action | None:
    if action.kind in ("B", "I"):
        return Action(action.stage, "F", action.microbatch)
    if action.kind == "W":
        return Action(action.stage, "I", action.microbatch)
    return None
