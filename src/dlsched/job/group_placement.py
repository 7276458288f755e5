"""Where a communication group's ranks fall across a node preset's NVLink domains.

A group of ``size`` ranks ``stride`` apart (``job.cluster``: ranks laid out as Megatron-Core
lays them out) repeats every ``stride x size`` ranks, once per offset below ``stride``. When
``domain`` (the GPUs of one NVLink domain: an 8-GPU node, a 72-GPU NVL72 rack) divides that
block, or the block is a whole number of domains holding the same share of the group each,
every copy of the group has the same shape: ``per_node`` ranks in each of ``nodes`` domains.
Otherwise some copies straddle a domain boundary unevenly (on 144 GPUs of two 72-GPU racks a
data-parallel group of 16 consecutive ranks holds ranks 64-71 in one rack and 72-79 in the
next; a pipeline group of 9 ranks 16 apart has 5 in one rack and 4 in the other). NCCL runs
such a group as it runs any group across nodes: NVLink inside a domain, the NICs between.

``placement`` gives the shape to price: that of the copy that crosses the most domains, and
among those the one with the fewest ranks in a domain (the collective waits for its slowest
copy, and the fewest ranks in a domain carry the inter-domain traffic on the fewest NICs),
priced as ``per_node`` ranks in each of ``size / per_node`` domains with ``per_node`` the
largest divisor of ``size`` not above that fewest count (an uneven split priced as the even
split it is at least as slow as: conservative, never below what the ranks in one domain
could share). Aligned groups keep their exact shape.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import lru_cache
from typing import NamedTuple


class Placement(NamedTuple):
    """A group's shape to price: ``per_node`` ranks in each of ``nodes`` domains, and whether
    some copy of it straddles a domain boundary unevenly (``straddles``)."""

    per_node: int
    nodes: int
    straddles: bool


@lru_cache(maxsize=4096)
def placement(domain: int, gpus: int, stride: int, size: int) -> Placement:
    """The shape of a group of ``size`` ranks ``stride`` apart among ``gpus`` ranks laid out
    ``domain`` to an NVLink domain (module docstring)."""
    if min(domain, gpus, stride, size) < 1:
        raise ValueError(f"placement: domain, gpus, stride and size must be positive (got "
                         f"{domain}, {gpus}, {stride}, {size})")
    aligned = _aligned(domain, gpus, stride, size)
    if aligned is not None:
        return aligned
    block = stride * size
    period = min(gpus, math.lcm(block, domain))  # the copies' shapes repeat with this period
    worst = (0, 0)  # (domains crossed, -fewest ranks in one of them)
    for start in range(0, period, block):
        for offset in range(stride):
            counts = Counter((start + offset + i * stride) // domain for i in range(size))
            worst = max(worst, (len(counts), -min(counts.values())))
    fewest = -worst[1]
    per_node = max(d for d in range(1, fewest + 1) if size % d == 0)
    return Placement(per_node, size // per_node, True)


def _aligned(domain: int, gpus: int, stride: int, size: int) -> Placement | None:
    """The shape every copy shares when the group is aligned with the domains (None when
    not)."""
    block = stride * size
    if block <= domain and (domain % block == 0 or gpus <= domain):
        return Placement(size, 1, False)  # every copy inside one domain
    if stride >= domain and stride % domain == 0:
        return Placement(1, size, False)  # every rank in a domain of its own
    if stride < domain and domain % stride == 0 and block % domain == 0:
        return Placement(domain // stride, block // domain, False)
    return None
