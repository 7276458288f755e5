"""The torch runtime (optional extra ``dlsched[torch]``): profile modules, calibrate the
network, execute data-parallel plans on torch.distributed and record measured timelines.

Importing this package does not import torch; each name below loads its module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Clock": "recorder",
    "Recorder": "recorder",
    "RankFailure": "spawn",
    "SpawnOptions": "spawn",
    "spawn": "spawn",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dlsched.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(f"dlsched.runtime.{_EXPORTS[name]}"), name)
