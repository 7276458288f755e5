"""Small instances shared by the pipeline tests."""

from __future__ import annotations

from dlsched.hardware.device_graph import server_graph
from dlsched.pipeline import PipelineProblem, Stage, synthetic_chain


def uniform_problem(p: int, m: int, f: float = 1.0, b: float = 2.0, act: float = 0.0,
                    split: bool = False, memory: int = 2**40) -> PipelineProblem:
    """``p`` identical one-GPU stages of forward ``f`` s and backward ``b`` s; links of 1 GB/s
    and no latency, so an activation of ``act`` bytes takes ``act / 1e9`` seconds."""
    chain = synthetic_chain([f] * p, [b] * p, [act] * p, split=split)
    graph = server_graph("uniform", [(p, 1e12, memory, 1e9, 0.0)], 1e9, 0.0)
    return PipelineProblem(chain, graph, m)


def one_gpu_stages(p: int) -> tuple[Stage, ...]:
    """Stage ``s`` = block ``s`` on GPU ``s``."""
    return tuple(Stage(s, s + 1, (s,)) for s in range(p))
