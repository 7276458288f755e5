"""Plans cached per problem, so searches that share candidates plan each one once.

A reproduction runs every policy on the same problem, and the tuned variants and ``dlsched``
re-use each other's plans (``dlsched`` scores every tuned baseline; ``usbyte-tuned`` plans the
default unit too). Problems and plans are immutable and hashable, so a policy decorated with
``cached_plan`` returns the same plan for an equal problem without planning again.
``clear_plan_caches`` empties every cache (benchmarks use it to time cold planning).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, TypeVar, cast

Planner = TypeVar("Planner", bound=Callable[..., Any])
_CACHED: list[Any] = []


def cached_plan(function: Planner) -> Planner:
    """``function`` with its last 32 results kept, keyed by its (hashable) arguments."""
    wrapped = lru_cache(maxsize=32)(function)
    _CACHED.append(wrapped)
    return cast(Planner, wrapped)


def clear_plan_caches() -> None:
    """Forget every cached plan."""
    for wrapped in _CACHED:
        wrapped.cache_clear()
