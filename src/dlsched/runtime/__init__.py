"""The torch runtime (optional extra ``dlsched[torch]``): ``runtime.dataparallel`` profiles
modules, calibrates the network and executes data-parallel plans on torch.distributed;
``runtime.pipeline`` profiles chains of blocks, calibrates the link and the runtime's own cost
and runs pipeline plans on torch.distributed.pipelining; both record measured timelines and
spawn their ranks with this package's shared modules.

Importing this package does not import torch; each name below loads its module on first use.
"""

from __future__ import annotations

from dlsched.lazy_exports import lazy_exports

_SOURCES = {
    "Clock": "dlsched.runtime.recorder",
    "Execution": "dlsched.runtime.execution",
    "Recorder": "dlsched.runtime.recorder",
    "RankFailure": "dlsched.runtime.spawn",
    "SpawnOptions": "dlsched.runtime.spawn",
    "spawn": "dlsched.runtime.spawn",
    "PipelineModel": "dlsched.runtime.pipeline.model",
    "PipelineRun": "dlsched.runtime.pipeline.run",
    "calibrate_link": "dlsched.runtime.pipeline.calibrate",
    "profile_blocks": "dlsched.runtime.pipeline.profile",
    "retimed_chain": "dlsched.runtime.pipeline.replay",
    "run_pipeline": "dlsched.runtime.pipeline.run",
    "run_pipelines": "dlsched.runtime.pipeline.run",
}

__all__ = sorted(_SOURCES)
__getattr__, __dir__ = lazy_exports(__name__, _SOURCES)
