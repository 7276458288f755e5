"""The torch runtime (optional extra ``dlsched[torch]``): profile modules, calibrate the
network, execute data-parallel plans on torch.distributed and pipeline plans on
torch.distributed.pipelining, and record measured timelines.

Importing this package does not import torch; each name below loads its module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Clock": "recorder",
    "Execution": "execution",
    "Recorder": "recorder",
    "RankFailure": "spawn",
    "SpawnOptions": "spawn",
    "spawn": "spawn",
    "PipelineModel": "pipeline.model",
    "PipelineRun": "pipeline.run",
    "calibrate_link": "pipeline.calibrate",
    "profile_blocks": "pipeline.profile",
    "retimed_chain": "pipeline.replay",
    "run_pipeline": "pipeline.run",
    "run_pipelines": "pipeline.run",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dlsched.runtime' has no attribute {name!r}")
    return getattr(importlib.import_module(f"dlsched.runtime.{_EXPORTS[name]}"), name)
