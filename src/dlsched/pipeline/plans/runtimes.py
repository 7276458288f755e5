"""Which existing training runtime can execute a plan, judged on its layout and schedule.

* One stage per GPU, every stage on the same number ``d`` of replicas taking microbatches
  round-robin (``d`` pipeline replicas): ``torch.distributed.pipelining`` with DDP, whose
  runtime executes any per-rank order (``_PipelineScheduleRuntime``), and in 1F1B order also
  Megatron-LM (PP x DP x TP).
* One stage per GPU with per-stage replica counts (no tensor parallelism), in 1F1B order:
  PipeDream's runtime (replicas round-robin) or DAPPLE's (replicas splitting every
  microbatch).
* Several stages per GPU: only the looped layout of interleaved 1F1B (stage ``s`` on rank
  ``s mod p``; Megatron-LM's virtual pipeline and torch's ``ScheduleInterleaved1F1B`` in that
  order, torch's runtime in any other) or the V
  of ZB-V (torch's ``ScheduleZBVZeroBubble``, or ``ScheduleDualPipeV`` for DualPipeV's
  overlapped pairs), over ``p >= 2`` pipeline ranks of equal,
  round-robin replicas. Anything else, e.g. several replicated stages on every GPU (a
  "pipeline" of one rank), no runtime we know of executes.
"""

from __future__ import annotations

from dlsched.pipeline.plans.plan import PipelinePlan

ONE_F_ONE_B = ("1f1b", "one_f_one_b")
"""Schedule notes of 1F1B orders (a baseline's name, dlsched's fixed order)."""


def runtime_for(plan: PipelinePlan) -> str | None:
    """The runtime(s) that can execute ``plan`` (see the module docstring), or None."""
    stages = plan.stages
    replicas = {len(stage.devices) for stage in stages}
    split = any(stage.split for stage in stages)
    hosted: dict[int, int] = {}
    for stage in stages:
        for device in stage.devices:
            hosted[device] = hosted.get(device, 0) + 1
    uniform = len(replicas) == 1 and not split
    schedule = plan.notes.get("schedule")
    if max(hosted.values()) == 1:
        if uniform:
            return "Megatron-LM, torch" if schedule in ONE_F_ONE_B else "torch"
        if plan.tensor_parallel > 1 or schedule not in ONE_F_ONE_B:
            return None
        return "DAPPLE" if split else "PipeDream"
    if not uniform:
        return None
    groups = list(dict.fromkeys(stage.devices for stage in stages))
    p, count = len(groups), len(stages)
    disjoint = len({d for group in groups for d in group}) == sum(map(len, groups))
    if p < 2 or not disjoint or count % p:
        return None
    if all(stage.devices == groups[s % p] for s, stage in enumerate(stages)):
        return ("Megatron-LM, torch (interleaved)" if schedule == "interleaved"
                else "torch (looped stages)")
    if count == 2 * p and all(stage.devices == groups[min(s, 2 * p - 1 - s)]
                              for s, stage in enumerate(stages)):
        return "torch (DualPipeV)" if plan.joined else "torch (ZB-V)"
    return None
