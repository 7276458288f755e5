"""The collective domain's scenario schema: one chunked collective (``dlsched collective``, a
``collective`` sweep, ``CollectiveScenario(...).run()``), its fields made of the shared input
types (``dlsched.inputs``) and the collective's own (operation, buffer size, policies)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from dlsched.collectives.plan import CollectiveOp, IntraPolicy
from dlsched.collectives.policies import POLICIES
from dlsched.collectives.run import CollectiveResult, run_collective
from dlsched.errors import ConfigError
from dlsched.inputs import (
    STRICT,
    AstraCompat,
    AstraNetwork,
    AstraSystem,
    Chunks,
    Concurrency,
    LatencyScale,
    Several,
    TopologyName,
    cached_topology,
    choice,
    limited,
    policy_choice,
)
from dlsched.validation import MESSAGE_SIZE


class CollectiveScenario(BaseModel):
    """One chunked collective: ``size`` bytes per NPU (unit strings such as "1 GB" accepted)
    of ``op`` on ``topology`` (every step latency times ``latency_scale``), split into
    ``chunks``, ``concurrency`` of them at once per dimension, ordered by ``policy`` across
    dimensions and ``intra`` within one; the ASTRA-sim files are read by ``dlsched
    collective`` (interop sits above this domain)."""

    model_config = STRICT
    topology: TopologyName = "4D-Ring_FC_Ring_SW"
    op: Annotated[choice([m.value for m in CollectiveOp], "collective"), Field(
        description="all-reduce, reduce-scatter, all-gather, all-to-all")] = "all-reduce"
    size: Annotated[limited(MESSAGE_SIZE, int), Field(
        description="Buffer per NPU, e.g. '1 GB', '256 MiB' (plain number: bytes; 1 B to "
        "1 PiB).")] = "1 GB"
    chunks: Chunks = 64
    policy: Annotated[policy_choice(POLICIES, "collective policy"),
                      Several("baseline,themis,dlsched"),
                      Field(description="Inter-dimension policy")] = "themis"
    intra: Annotated[choice([m.value for m in IntraPolicy], "intra-dimension order"),
                     Field(description="Intra-dimension order: fifo or scf.")] = "scf"
    concurrency: Concurrency = 1
    latency_scale: LatencyScale = 1.0
    astra_network: AstraNetwork = None
    astra_system: Annotated[AstraSystem, Field(
        description="ASTRA-sim system JSON: sets --chunks, --concurrency, --intra (giving "
        "another value is refused) and each dimension's algorithm; its inter-dimension "
        "policy runs first.")] = None
    astra_compat: AstraCompat = False

    def run(self) -> CollectiveResult:
        """Plan, simulate and score this collective (without ASTRA-sim files: ``dlsched
        collective`` reads those)."""
        given = [name for name in ("astra_network", "astra_system", "astra_compat")
                 if getattr(self, name)]
        if given:
            raise ConfigError(f"{given[0]}: ASTRA-sim inputs are read by dlsched collective, "
                              "not by a collective scenario run; accepted: leave it out")
        return run_collective(cached_topology(self.topology, self.latency_scale), self.op,
                              self.size, self.chunks, self.policy, self.intra,
                              self.concurrency)
