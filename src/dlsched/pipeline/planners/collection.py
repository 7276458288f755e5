"""Full garbage collections put off while planning.

Planning keeps every simulated result of its instance (``simulate._KEPT``), each with its
span records, so the baselines' searches and dlsched's refinement build hundreds of
thousands of long-lived objects. Under CPython's default thresholds (700, 10, 10) the
collector then runs full collections over all of them again and again: measured with
``gc.callbacks`` on ``reproduce pipeline``'s gpt2-xl scenarios on 4x4-PCIe-25Gb (none and
full recomputation, one process), 6.75 s of 47.4 CPU-s in the collector, 4.1 s of it in 25
full collections. Raising the youngest generation's threshold instead costs more, not less
(100,000: 1.66 s in 18 young collections of scenario 9 against 0.25 s in 1,758 at 700; a
large young generation no longer fits the processor's caches).

``fewer_collections`` raises the oldest generation's threshold to ``FULL_THRESHOLD`` while
planning runs (``registry.run_planner``, and a whole scenario of ``reproduce pipeline``) and
restores the thresholds after: the same two scenarios spent 2.55 s in the collector, no full
collection, peak resident memory 376 MB instead of 305 MB. On the whole of ``reproduce
pipeline`` (2-core VM, exclusive lock, 2026-11-26) 139.1, 156.4 and 199.7 CPU-s against
176.4, 185.8 and 198.0 for the code before, run alternately while the VM slowed (the last pair
shows no gain, a fourth 176.1 against 168.4: the end-to-end gain is not established; the two
scenarios above, alternating in one process: 40.45 and 38.41 CPU-s against 47.70 and 44.96);
the price is memory: a worker's peak resident
size 879 MB instead of 343 MB, since cyclic garbage that reached the oldest generation waits
for the next full collection. Running one full collection at the end of each scenario
instead kept 344 MB but took 191.3 and 193.7 CPU-s, no gain. Since a simulation stopped by
``simulate.Late`` drops its pending events and transfers (``_Run.run``: they referred back
to it), it is freed by reference counting instead of waiting as cyclic garbage: the same two
scenarios then spent 0.27 s in the collector with this and 0.83 s without (24.4 and 24.7
CPU-s, shared lock, loaded machine), peak resident memory 297 MB either way; it is kept for
those 0.5 s. Nothing is switched off: the young generations are collected as before (most
remaining cyclic garbage is found there), a full collection
still runs after ``FULL_THRESHOLD`` collections of the middle generation (about 7 million net
container allocations at the default thresholds), and the first ones after leaving are on the
usual schedule. The thresholds are process-wide: planners run in threads of one process share
them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

FULL_THRESHOLD = 1000


@contextmanager
def fewer_collections(full: int = FULL_THRESHOLD) -> Iterator[None]:
    """Within the block, a full collection runs after ``full`` collections of the middle
    generation (not fewer than the current threshold; with collection turned off by a
    threshold of 0 nothing changes); the thresholds before are restored on leaving."""
    before = gc.get_threshold()
    if before[0]:
        gc.set_threshold(before[0], before[1], max(full, before[2]))
    try:
        yield
    finally:
        gc.set_threshold(*before)
