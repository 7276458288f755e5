"""Enumerating every partition and mapping of a small instance (used by the oracle, and by
the dlsched planner when the space is small enough to rank exhaustively)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import combinations, permutations, product

from dlsched.pipeline.plans.plan import Stage


def cut_sets(num_blocks: int, max_stages: int) -> list[tuple[int, ...]]:
    """Every way to cut ``num_blocks`` blocks into at most ``max_stages`` non-empty stages,
    as boundary tuples ``(0, ..., num_blocks)``."""
    result = []
    for p in range(1, min(num_blocks, max_stages) + 1):
        for inner in combinations(range(1, num_blocks), p - 1):
            result.append((0, *inner, num_blocks))
    return result


def device_groups(num_stages: int, num_devices: int,
                  every_order: bool) -> Iterator[tuple[tuple[int, ...], ...]]:
    """Every assignment of disjoint non-empty GPU sets to the stages; with ``every_order``
    each set also in every order (which decides the replica of each microbatch)."""
    for owner in product(range(num_stages + 1), repeat=num_devices):
        groups = [tuple(d for d in range(num_devices) if owner[d] == s + 1)
                  for s in range(num_stages)]
        if all(groups):
            if every_order:
                yield from product(*(permutations(group) for group in groups))
            else:
                yield tuple(groups)


def all_partitions(num_blocks: int, num_devices: int,
                   every_order: bool) -> Iterator[tuple[Stage, ...]]:
    """Every partition and mapping (see ``cut_sets`` and ``device_groups``)."""
    for cuts in cut_sets(num_blocks, num_devices):
        for groups in device_groups(len(cuts) - 1, num_devices, every_order):
            yield tuple(Stage(cuts[s], cuts[s + 1], groups[s]) for s in range(len(groups)))
