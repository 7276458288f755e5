"""The data-parallel domain's scenario schema: one iteration's gradient all-reduces
(``dlsched dataparallel``, a ``dataparallel`` sweep, ``DataParallelScenario(...).run()``):
what is trained (a zoo model or a per-layer profile, its layer times, the batch), what it runs
on (the all-reduce cost model, the ranks, the GPU) and how it is scheduled (all-reduces in
flight, the policy)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any

from pydantic import BaseModel, Field, field_validator

from dlsched.dataparallel.comm import CommModel
from dlsched.dataparallel.compute_source import COMPUTES, layer_times, load_trained
from dlsched.dataparallel.network_spec import network_for_workers
from dlsched.dataparallel.policies import POLICIES
from dlsched.dataparallel.problem import DPProblem, LayerTimes, problem_from_model
from dlsched.dataparallel.run import DPResult, run_dataparallel
from dlsched.inputs import STRICT, Several, checked, choice, limited, policy_choice
from dlsched.models import Model, device_compute, get_model
from dlsched.validation import BATCH, FRACTION, RATIO, WORKERS, count

IN_FLIGHT = count("messages in flight", 1, 64)


class DataParallelScenario(BaseModel):
    """One data-parallel iteration: a zoo model (or a per-layer ``profile`` file) on
    ``workers`` ranks (None: the count ``network`` describes) behind ``network`` (the
    all-reduce cost model), ``in_flight`` all-reduces at once, layer times from ``compute``
    (``device``: the calibrated ``device``, or ``efficiency`` x its peak;
    ``params-proportional``: the US-Byte authors'), ``batch_size`` samples per worker (None:
    32, or the authors'), scheduled by ``policy``."""

    model_config = STRICT
    model: Annotated[checked(get_model), Field(description="Zoo model name.")] = "resnet50"
    profile: Annotated[str | None, Field(
        description="Per-layer profile CSV/JSON instead.")] = None
    network: Annotated[checked(lambda text: network_for_workers(text, None)), Field(
        description="usbyte-2/4/8, 10gbe-8, 'ALPHA,BETA', 'ring|tree|nccl:BW,LAT', "
        "'topology:PRESET' or a fitted network file (.yaml/.json).")] = "usbyte-8"
    workers: Annotated[limited(WORKERS, int) | None, Field(  # after network: checked against it
        description="Data-parallel ranks; default: the network's own count (usbyte-8: 8, "
        "topology: its NPUs, a network file's), 8 for ring|tree|nccl:...; refused for "
        "ALPHA,BETA.")] = None
    in_flight: Annotated[limited(IN_FLIGHT, int), Field(
        description="All-reduces the network carries at once, sharing bandwidth "
        "(1: serial).")] = 1
    device: Annotated[checked(device_compute), Field(
        description="Calibrated GPU: v100, a100, h100 or a GPU file, optionally -PRECISION "
        "(v100-fp32, h100-tf32, v100-fp16).")] = "v100-fp32"
    efficiency: Annotated[limited(FRACTION, float) | None, Field(
        description="Instead of the calibrated model: this fraction of the precision's peak "
        "for every layer.")] = None
    backward_ratio: Annotated[limited(RATIO, float), Field(
        description="Backward time / forward time (with --efficiency or "
        "params-proportional).")] = 2.0
    compute: Annotated[choice(COMPUTES, "compute source"), Field(
        description="device: the --device model; params-proportional: the US-Byte authors' "
        "forward times, proportional to parameter count (vgg16, resnet50, resnet152; scaled "
        "from their batch size).")] = "device"
    batch_size: Annotated[limited(BATCH, int) | None, Field(
        description="Samples per worker; default 32, or the authors' batch size with "
        "--compute params-proportional.")] = None
    policy: Annotated[policy_choice(POLICIES, "data-parallel policy"),
                      Several(",".join(POLICIES)),
                      Field(description="Gradient scheduling policy")] = "usbyte"

    @field_validator("workers")
    @classmethod
    def _workers_match_network(cls, value: int | None, info: Any) -> int | None:
        """A preset, topology or fitted file priced for another rank count is refused here
        (as ``dlsched dataparallel`` refuses it), not stored under the wrong label."""
        if "network" in info.data and value is not None:
            network_for_workers(info.data["network"], value)
        return value

    def setup(self) -> DataParallelSetup:
        """The layer times, network and problem this scenario describes (not cached: a file
        named by ``profile`` or ``network`` is read again)."""
        times, batch, label = layer_times(self.compute, self.device, self.efficiency,
                                          self.backward_ratio, self.model, self.profile,
                                          self.batch_size)
        comm, workers = network_for_workers(self.network, self.workers)
        trained = load_trained(self.model, self.profile)
        return DataParallelSetup(times, batch, label, comm, workers, trained,
                                 problem_from_model(trained, times, batch, comm, self.in_flight))

    def problem(self) -> DPProblem:
        """The scheduling problem this scenario describes (cached per worker process)."""
        default = type(self).model_fields["policy"].default
        return _dp_problem(self.model_copy(update={"policy": default}))

    def run(self) -> DPResult:
        """Schedule and simulate the iteration under ``policy``."""
        return run_dataparallel(self.problem(), self.policy)


@dataclass(frozen=True)
class DataParallelSetup:
    """A data-parallel scenario's inputs: the layer ``times`` (compute model), the
    ``batch_size`` (samples per worker) and its ``compute_label`` for titles, the all-reduce
    cost model ``comm`` and the rank count it describes (``workers``; None: as measured), the
    ``trained`` model and the scheduling ``problem``."""

    times: LayerTimes
    batch_size: int
    compute_label: str
    comm: CommModel
    workers: int | None
    trained: Model
    problem: DPProblem


@lru_cache(maxsize=64)
def _dp_problem(scenario: DataParallelScenario) -> DPProblem:
    return scenario.setup().problem
