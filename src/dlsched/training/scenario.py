"""The training domain's scenario schema: whole training iterations (``dlsched train``, a
``training`` sweep, ``TrainingScenario(...).run()``) of a workload (zoo or ASTRA-sim file) on a
topology (preset, file or ASTRA-sim network), its collectives chunked and ordered by a
policy."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field

from dlsched.inputs import (
    STRICT,
    AstraCompat,
    AstraNetwork,
    AstraSystem,
    Choices,
    Chunks,
    Concurrency,
    LatencyScale,
    Several,
    TopologyName,
    choice,
    limited,
    one_of,
)
from dlsched.training.policies import POLICY_ALIASES, TRAINING_POLICIES
from dlsched.training.run import TrainingResult, run_policies
from dlsched.training.setup import LATENCIES, TrainingSetup, training_setup
from dlsched.training.workloads import WORKLOADS
from dlsched.validation import count

ITERATIONS = count("iteration count", 1, 1000)


def _training_policy(value: str) -> str:
    return POLICY_ALIASES.get(value, one_of(value, [*TRAINING_POLICIES, *POLICY_ALIASES],
                                            "training policy"))


class TrainingScenario(BaseModel):
    """Whole training iterations of a zoo workload (or an ASTRA-sim workload file) on a
    topology preset (or an ASTRA-sim network file), ``iterations`` simulated and the last
    reported; ``latency`` ('table' or 'zero') and ``latency_scale`` multiply every step
    latency; ``astra_system`` / ``astra_compat`` as in ``dlsched collective``."""

    model_config = STRICT
    workload: Annotated[choice(WORKLOADS, "training workload"), Field(
        description="Workload: " + ", ".join(WORKLOADS))] = "resnet152"
    topology: TopologyName = "3D-FC_Ring_SW"
    policy: Annotated[str, AfterValidator(_training_policy), Choices(tuple(TRAINING_POLICIES)),
                      Several("baseline,themis,dlsched,ideal"),
                      Field(description="Collective policy")] = "dlsched"
    latency: Annotated[choice(LATENCIES, "latency setting"), Field(
        description="'table' (the topology's step latencies) or 'zero'.")] = "table"
    latency_scale: LatencyScale = 1.0
    iterations: Annotated[limited(ITERATIONS, int), Field(
        description="Iterations simulated; the last is reported.")] = 2
    chunks: Chunks = 64
    concurrency: Concurrency = 1
    astra_network: Annotated[AstraNetwork, Field(
        description="ASTRA-sim 2.x network YAML instead of --topology.")] = None
    astra_system: AstraSystem = None
    astra_workload: Annotated[str | None, Field(
        description="ASTRA-sim 1.0 text workload instead of --workload.")] = None
    astra_compat: AstraCompat = False

    def setup(self) -> TrainingSetup:
        """The workload, topology and settings these options describe."""
        return training_setup(self.workload, self.topology, self.latency, self.latency_scale,
                              self.chunks, self.concurrency, self.astra_network,
                              self.astra_system, self.astra_workload, self.astra_compat)

    def run(self) -> TrainingResult:
        """Simulate the iterations under ``policy``; the last one is reported."""
        setup = self.setup()
        result, = run_policies(setup.workload, setup.topology, [self.policy], self.iterations,
                               setup.chunks, setup.concurrency, False, setup.compat,
                               setup.op_topologies)
        return result
