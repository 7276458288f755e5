"""DualPipe and DualPipeV: per-GPU orders whose forward and backward chunks of different
microbatches run pairwise overlapped.

DualPipe (DeepSeek-AI, "DeepSeek-V3 Technical Report", 2024, section 3.2.1 and Figure 5; the
order of the authors' ``deepseek-ai/DualPipe`` repository, ``DualPipe.step``) feeds
microbatches from both ends of ``p`` (even) pipeline ranks: the model's ``p`` stages run in the
forward direction on ranks ``0 .. p - 1`` and, for the other half of the microbatches, in the
reverse direction on ranks ``p - 1 .. 0``, so rank ``k`` holds stages ``k`` and ``p - 1 - k``
(twice the parameters of 1F1B). Here that is ``p`` stages of two replicas each: stage ``s`` on
GPUs ``(s, p - 1 - s)``, even microbatches on the first (forward direction), odd ones on the
second (reverse direction); the two copies of a stage all-reduce their gradients at the end,
as the simulator does for every replicated stage. DualPipeV (the same repository's
``DualPipeV``, from Sea AI Lab's "cut-in-half" of DualPipe) keeps one direction and folds
``2p`` stages into a V: rank ``k`` holds stage ``k`` on the way down and ``2p - 1 - k`` on the
way up, like ZB-V.

Both run the same eight steps on every rank, with ``n`` ranks from an end to the middle (``p /
2`` for DualPipe, ``p`` for DualPipeV), ``h`` the rank's distance from its nearer end (``min(k,
p - 1 - k)``; ``k`` for DualPipeV), ``c`` microbatches per phase and phase 0 the stage nearer
the start of its direction: ``2(n - h - 1)`` F0; ``h + 1`` times F0 F1; ``n - h - 1`` times I1
W1 F1 (zero bubble); ``c - 2n + h + 1`` times the pairs (F0 & B1) (F1 & B0), the middle
rank (``h = n - 1``) running its first F0 and B1 apart; ``n - h - 1`` times B1 (F1 & B0);
``h + 1`` times B1 B0, the later half of them split into I with the W put off (from the
middle on, B1 first on odd ``h``, B0 first on even ``h``); ``n - h - 1`` times W, then I0
with its W put off; ``h + 1`` W. Put-off W's run oldest first. A full backward is written
``I W`` run as one unit (its input gradient leaves when the whole backward ends); an
overlapped pair ``F & B`` is the unit ``F I W`` (``PipelinePlan.joined``): it starts when the
forward's activation and the backward's gradient are both there, runs both chunks' compute
with each one's communication hidden behind the other's (in the pipeline domain a chunk's
only communication is the transfer between stages, which always runs beside compute, so the
unit takes the sum of the two chunks' compute; the job evaluator hides the expert all-to-alls,
``job.evaluation.pipeline_time``), and sends both outputs when it ends.
"""

from __future__ import annotations

from dlsched.errors import ConfigError
from dlsched.pipeline.plans.actions import Action

Unit = tuple[tuple[int, str], ...]
"""One unit of a rank's order before numbering: (phase, kind) per action; kind ``F``, ``I``
(the W put off), ``B`` (full backward, I and W in one unit) or ``W`` (the oldest put-off W)."""


def check_dualpipe(name: str, num_microbatches: int, num_ranks: int) -> None:
    """ConfigError unless ``name`` (dualpipe or dualpipev) can run ``num_microbatches`` on
    ``num_ranks`` pipeline ranks: DualPipe needs an even number of ranks (at least 2) and an
    even number of microbatches, at least ``2 num_ranks``; DualPipeV at least ``2 num_ranks``
    microbatches (the authors' repository refuses fewer)."""
    if name == "dualpipe" and (num_ranks < 2 or num_ranks % 2):
        raise ConfigError(f"pp: DualPipe needs an even number of pipeline ranks (got "
                          f"{num_ranks}); accepted: 2, 4, 6, ...")
    odd = name == "dualpipe" and num_microbatches % 2
    if num_microbatches < 2 * num_ranks or odd:
        kind = "an even number of" if name == "dualpipe" else ""
        raise ConfigError(f"num_microbatches: {name} on {num_ranks} ranks needs {kind} "
                          f"microbatches at least 2 x {num_ranks} = {2 * num_ranks} (got "
                          f"{num_microbatches})".replace("  ", " "))


def rank_units(n: int, h: int, c: int) -> list[Unit]:
    """The eight steps (module docstring) of the rank ``h`` from its end, ``n`` ranks from an
    end to the middle, ``c >= 2n`` microbatches per phase, as units of (phase, kind)."""
    rest = n - h - 1
    units: list[Unit] = [((0, "F"),)] * (2 * rest)
    units += [((0, "F"),), ((1, "F"),)] * (h + 1)
    units += [((1, "I"),), ((1, "W"),), ((1, "F"),)] * rest
    for i in range(c - 2 * n + h + 1):
        if i == 0 and h == n - 1:
            units += [((0, "F"),), ((1, "B"),)]
        else:
            units.append(((0, "F"), (1, "B")))
        units.append(((1, "F"), (0, "B")))
    units += [((1, "B"),), ((1, "F"), (0, "B"))] * rest
    put_off = False
    for i in range(h + 1):
        for phase in (1, 0):
            if i == (h + 1) // 2 and h % 2 == phase:
                put_off = True
            units.append(((phase, "I" if put_off else "B"),))
    units += [((0, "W"),), ((0, "I"),)] * rest
    return units + [((0, "W"),)] * (h + 1)


def number_units(units: list[Unit], stage_of: tuple[int, int],
                 microbatch_of: tuple[list[int], list[int]]) -> list[tuple[Action, ...]]:
    """``units`` as actions: phase ``q`` is stage ``stage_of[q]`` running microbatches
    ``microbatch_of[q]`` in order; a put-off W is the oldest I whose W has not run."""
    count = {(q, kind): 0 for q in (0, 1) for kind in "FI"}
    put_off: list[Action] = []
    numbered = []
    for unit in units:
        actions: list[Action] = []
        for phase, kind in unit:
            if kind == "W":
                actions.append(put_off.pop(0))
                continue
            key = (phase, "F" if kind == "F" else "I")
            j = microbatch_of[phase][count[key]]
            count[key] += 1
            if kind == "F":
                actions.append(Action(stage_of[phase], "F", j))
                continue
            actions.append(Action(stage_of[phase], "I", j))
            if kind == "B":
                actions.append(Action(stage_of[phase], "W", j))
            else:
                put_off.append(Action(stage_of[phase], "W", j))
        numbered.append(tuple(actions))
    return numbered


def flatten(per_gpu: list[list[tuple[Action, ...]]]) -> tuple[tuple[tuple[Action, ...], ...],
                                                              tuple[frozenset[int], ...]]:
    """Per-GPU units as (orders, joined): the actions in order and, per GPU, the positions
    whose action runs in one unit with the next (``PipelinePlan.joined``)."""
    orders, joined = [], []
    for units in per_gpu:
        order: list[Action] = []
        links: set[int] = set()
        for unit in units:
            links.update(range(len(order), len(order) + len(unit) - 1))
            order.extend(unit)
        orders.append(tuple(order))
        joined.append(frozenset(links))
    return tuple(orders), tuple(joined)


def dualpipe_units(num_microbatches: int, num_ranks: int) -> list[list[tuple[Action, ...]]]:
    """DualPipe's units per GPU (module docstring) on ``num_ranks`` GPUs, stage ``s`` on
    GPUs ``(s, num_ranks - 1 - s)``: microbatch ``2i + d`` is the ``i``-th of direction ``d``
    (0 forward, 1 reverse)."""
    check_dualpipe("dualpipe", num_microbatches, num_ranks)
    p, n, c = num_ranks, num_ranks // 2, num_microbatches // 2
    per_gpu = []
    for k in range(p):
        h, first = min(k, p - 1 - k), 0 if k < n else 1
        directions = (first, 1 - first)
        per_gpu.append(number_units(
            rank_units(n, h, c), (h, p - 1 - h),
            tuple([2 * i + d for i in range(c)] for d in directions)))
    return per_gpu


def dual_devices(groups: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    """The replicas of DualPipe's ``p = len(groups)`` stages on ``p`` ranks of ``d``
    data-parallel GPUs: stage ``s`` alternates the GPUs of rank ``s`` (forward direction)
    and of rank ``p - 1 - s`` (reverse), ``(g_s[0], g_{p-1-s}[0], g_s[1], ...)``, so with
    round-robin replicas microbatch ``j`` runs in direction ``j % 2`` on data-parallel
    replica ``(j // 2) % d``."""
    p = len(groups)
    return tuple(tuple(gpu for pair in zip(groups[s], groups[p - 1 - s], strict=True)
                       for gpu in pair) for s in range(p))


def dualpipe_grid_units(num_microbatches: int, groups: tuple[tuple[int, ...], ...],
                        num_devices: int) -> list[list[tuple[Action, ...]]]:
    """DualPipe's units per GPU on ``p = len(groups)`` ranks of ``d`` data-parallel
    replicas, stages placed by ``dual_devices``: replica ``i`` runs DualPipe (as
    ``dualpipe_units``) on the microbatches ``j`` with ``(j // 2) % d == i``, direction
    ``j % 2``. ConfigError unless ``p`` is even and every replica gets the same even number
    of microbatches, at least ``2p`` (``check_dualpipe``; ``num_microbatches`` a multiple of
    ``2d``)."""
    p, d = len(groups), len(groups[0])
    if num_microbatches % (2 * d):
        raise ConfigError(f"num_microbatches: DualPipe over {d} data-parallel replicas needs "
                          f"a multiple of 2 x {d} = {2 * d} (got {num_microbatches})")
    n = p // 2
    per_gpu: list[list[tuple[Action, ...]]] = [[] for _ in range(num_devices)]
    for replica in range(d):
        local = [j for j in range(num_microbatches) if (j // 2) % d == replica]
        check_dualpipe("dualpipe", len(local), p)
        by_direction = ([j for j in local if j % 2 == 0], [j for j in local if j % 2 == 1])
        for k in range(p):
            h, first = min(k, p - 1 - k), 0 if k < n else 1
            per_gpu[groups[k][replica]] = number_units(
                rank_units(n, h, len(local) // 2), (h, p - 1 - h),
                (by_direction[first], by_direction[1 - first]))
    return per_gpu


def dualpipev_units(num_microbatches: int, groups: tuple[tuple[int, ...], ...],
                    num_devices: int) -> list[list[tuple[Action, ...]]]:
    """DualPipeV's units per GPU (module docstring) on ``p = len(groups)`` ranks of ``d``
    data-parallel replicas: GPU ``groups[k][i]`` holds stages ``k`` and ``2p - 1 - k`` for the
    microbatches ``j`` with ``j % d == i`` (at least ``2p`` of them)."""
    p, d = len(groups), len(groups[0])
    per_gpu: list[list[tuple[Action, ...]]] = [[] for _ in range(num_devices)]
    for replica in range(d):
        local = list(range(replica, num_microbatches, d))
        check_dualpipe("dualpipev", len(local), p)
        for k in range(p):
            per_gpu[groups[k][replica]] = number_units(rank_units(p, k, len(local)),
                                                       (k, 2 * p - 1 - k), (local, local))
    return per_gpu
