"""Event-driven execution of one collective plan on the shared-dimension network model.

Each chunk is a flow of stages over the dimensions (``network.Network``): a stage holds one of
the dimension's ``concurrency`` slots for its fixed latency, then for its transfer, which shares
the dimension's bandwidth with the other transfers in flight. Free slots serve waiting stages
FIFO by arrival or SCF (smallest chunk first: the fewest bytes to send on this dimension; ties
by arrival). All chunks are ready at time 0, in chunk order.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from dlsched.collectives.algorithms import stage_latency
from dlsched.collectives.network import FlowStage, Network
from dlsched.collectives.network import dim_resource as network_dim_resource
from dlsched.collectives.plan import (
    ChunkRoute,
    CollectiveOp,
    CollectivePlan,
    Stage,
    route_stage_data,
)
from dlsched.hardware.topology import Topology
from dlsched.sim.engine import Engine
from dlsched.sim.timeline import Timeline


@dataclass(frozen=True)
class Execution:
    """What the simulator returns: the timeline, its end time (s) and engine events."""

    timeline: Timeline
    time: float
    events: int


def dim_resource(plan: CollectivePlan, dim: int) -> str:
    """Resource name of a dimension in timelines, e.g. ``dim1 Ring``."""
    return network_dim_resource(plan.topology, dim)


def plan_flows(plan: CollectivePlan,
               dim_map: tuple[int, ...] | None = None) -> list[list[FlowStage]]:
    """Each chunk's stages as flows; ``dim_map[i]`` is the physical dimension that the plan's
    dimension ``i`` runs on (identity by default)."""
    return [list(_route_flow(plan.topology, plan.op, route.size, route.stages, dim_map))
            for route in plan.routes]


@lru_cache(maxsize=1 << 16)
def _route_flow(topology: Topology, op: CollectiveOp, size: int, stages: tuple[Stage, ...],
                dim_map: tuple[int, ...] | None) -> tuple[FlowStage, ...]:
    """The flow of one chunk route (cached: the chunks of a collective share a few routes)."""
    return tuple(FlowStage(stage.dim if dim_map is None else dim_map[stage.dim],
                           stage_latency(topology.dims[stage.dim], stage.phase), sent,
                           stage.phase.value)
                 for stage, _, sent in route_stage_data(topology, op, ChunkRoute(0, size, stages)))


def execute_plan(plan: CollectivePlan, record: bool = True,
                 flows: list[list[FlowStage]] | None = None) -> Execution:
    """Simulate ``plan`` (assumed valid) and return its timeline and completion time (s);
    ``record=False`` skips building the timeline (for searches that only need the time);
    ``flows``: the chunks' stages when not priced by ``plan_flows`` (ASTRA-sim compatibility)."""
    engine = Engine()
    network = Network(engine, plan.topology, plan.concurrency, plan.intra, record)
    network.submit(plan_flows(plan) if flows is None else flows,
                   args=[{"chunk": r.chunk} for r in plan.routes],
                   labels=[f"c{r.chunk} " for r in plan.routes])
    end = engine.run()
    return Execution(Timeline(network.spans), end, engine.events_processed)
