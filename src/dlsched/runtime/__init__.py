"""The torch runtime (optional extra ``dlsched[torch]``): ``runtime.dataparallel`` profiles
modules, calibrates the network and executes data-parallel plans on torch.distributed;
``runtime.pipeline`` profiles chains of blocks, calibrates the link and the runtime's own cost
and runs pipeline plans on torch.distributed.pipelining; both record measured timelines and
spawn their ranks with this package's shared modules. ``gpu_calibration`` fits a GPU's
constants to measured steps or to kernels timed here (``dlsched compute calibrate|measure``).

Importing this package does not import torch; each name below loads its module on first use.
"""

from __future__ import annotations

from dlsched.lazy_exports import lazy_exports

_SOURCES = {
    "Clock": "dlsched.runtime.recorder",
    "Execution": "dlsched.runtime.execution",
    "Recorder": "dlsched.runtime.recorder",
    **dict.fromkeys(("RankFailure", "SpawnOptions", "check_backend", "check_ranks", "require_torch",
                     "spawn", "usable_cores"), "dlsched.runtime.spawn"),
    "TrainConfig": "dlsched.runtime.dataparallel.train",
    "check_load": "dlsched.runtime.dataparallel.calibrate",
    "write_network": "dlsched.runtime.dataparallel.calibrate",
    "write_profile": "dlsched.runtime.dataparallel.profile",
    **dict.fromkeys(("calibrate_network", "calibration_sizes", "profile_module",
                     "train_policies"), "dlsched.runtime.dataparallel.commands"),
    **dict.fromkeys(("calibrate_devices", "check_plan_run", "profile_chain", "run_plan"),
                    "dlsched.runtime.pipeline.commands"),
    **dict.fromkeys(("DEVICES", "calibrate_gpu", "kernel_grid", "measure_gpu"),
                    "dlsched.runtime.gpu_calibration"),
    "PipelineModel": "dlsched.runtime.pipeline.model",
    "PipelineRun": "dlsched.runtime.pipeline.run",
    "calibrate_link": "dlsched.runtime.pipeline.calibrate",
    "profile_blocks": "dlsched.runtime.pipeline.profile",
    "retimed_chain": "dlsched.runtime.pipeline.replay",
    "run_pipeline": "dlsched.runtime.pipeline.run",
    "run_pipelines": "dlsched.runtime.pipeline.run",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _SOURCES)
