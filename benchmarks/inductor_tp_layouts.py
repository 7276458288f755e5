"""What Inductor runs around TorchTitan-style sequence-parallel linears (issue 48; the evidence
behind ``job.communication.sp_relayout`` and the compiled recomputation in ``job.layer_costs``).

Compiles one block of two column/row-parallel pairs under ``SequenceParallel`` RMSNorms
(``parallelize_module``, as TorchTitan's ``apply_tp``) on a fake process group of 8 (no GPU, no
communication: ``torch.testing._internal.distributed.fake_pg``), forward and backward, and
prints, per compiled graph, the collectives, the matmuls and the kernels whose names show a
re-layout (``cat``/``split``), as Inductor's generated code calls them. ``--async-tp`` forces
Inductor's micro-pipeline TP pass on with CPU stand-ins for the symmetric-memory ops (their
outputs strided as the CUDA ops return them; the numbers they compute are meaningless).
Async TP's weight-gradient re-layouts are copies inside kernels named after the ops fused with
them (``..._t_view_...``, reading the gathered buffer with permuted indices): ``--code`` prints
the whole generated code to read them.

    python benchmarks/inductor_tp_layouts.py --batch 4 --ac full [--async-tp]

Needs torch with ``torch.distributed`` (CPU build is enough); a minute or two of CPU.
"""

from __future__ import annotations

import argparse
import functools
import re
from collections import defaultdict
from typing import Any

WORLD = 8
WIDTH, FFN, TOKENS = 256, 512, 64


def _stand_ins(torch: Any) -> None:
    """CPU kernels for symm_mem's fused ops, laid out as the CUDA ones return them."""
    lib = torch.library.Library("symm_mem", "IMPL")

    def all_gather_matmul(shard, weights, gather_dim, group_name, return_A=True):
        flat = shard.movedim(gather_dim, 0)
        lead = [WORLD, *flat.shape[:-1]]
        gathered = torch.cat([flat.flatten(0, -2)] * WORLD, 0)

        def unflatten(t):
            return t.view(*lead, -1).flatten(0, 1).movedim(0, gather_dim)
        return (unflatten(gathered) if return_A else None,
                [unflatten(gathered @ w) for w in weights])

    def matmul_reduce_scatter(a, weight, reduce_op, scatter_dim, group_name):
        first = a.movedim(scatter_dim, 0).chunk(WORLD)[0]
        out = (first.flatten(0, -2) @ weight).view(*first.shape[:-1], -1)
        return out.movedim(0, scatter_dim).contiguous()

    lib.impl("fused_all_gather_matmul", all_gather_matmul, "CPU")
    lib.impl("fused_matmul_reduce_scatter", matmul_reduce_scatter, "CPU")
    _stand_ins.lib = lib  # keep the registration alive


def _per_op_policy(torch: Any) -> Any:
    """TorchTitan's per-op policy: keep every other ``mm`` and the reduce-scatters."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    keep = {torch.ops.aten.mm.default, torch.ops._c10d_functional.reduce_scatter_tensor.default}
    counts: dict[str, int] = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        key = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            counts[key] += 1
        kept = func in keep and not (func == torch.ops.aten.mm.default and counts[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if kept else CheckpointPolicy.PREFER_RECOMPUTE
    return functools.partial(create_selective_checkpoint_contexts, policy)


def run(batch: int, ac: str, async_tp: bool, whole: bool = False) -> list[str]:
    """The generated code's calls of interest, graph by graph."""
    import torch
    import torch.distributed as dist
    from torch._inductor.utils import run_and_get_code
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torch.utils.checkpoint import checkpoint

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    mesh = init_device_mesh("cpu", (WORLD,))
    if async_tp:
        import torch._inductor.config as inductor_config
        import torch.distributed._symmetric_memory as symm
        inductor_config._micro_pipeline_tp = True
        dist.is_nccl_available = lambda: True
        symm.is_symm_mem_enabled_for_group = lambda *a, **k: True
        _stand_ins(torch)

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = torch.nn.RMSNorm(WIDTH), torch.nn.RMSNorm(WIDTH)
            self.w1 = torch.nn.Linear(WIDTH, FFN, bias=False)
            self.w2 = torch.nn.Linear(FFN, WIDTH, bias=False)
            self.w3 = torch.nn.Linear(WIDTH, FFN, bias=False)
            self.w4 = torch.nn.Linear(FFN, WIDTH, bias=False)

        def body(self, x):
            h = x + self.w2(torch.nn.functional.silu(self.w1(self.norm1(x))))
            return h + self.w4(torch.nn.functional.gelu(self.w3(self.norm2(h))))

        def forward(self, x):
            if ac == "full":
                return checkpoint(self.body, x, use_reentrant=False)
            if ac == "op":
                return checkpoint(self.body, x, use_reentrant=False,
                                  context_fn=_per_op_policy(torch))
            return self.body(x)

    block = Block()
    row = functools.partial(RowwiseParallel, output_layouts=Shard(1), use_local_output=False)
    parallelize_module(block, mesh, {
        "norm1": SequenceParallel(), "w1": ColwiseParallel(input_layouts=Shard(1)), "w2": row(),
        "norm2": SequenceParallel(), "w3": ColwiseParallel(input_layouts=Shard(1)), "w4": row()})
    x = DTensor.from_local(torch.randn(batch, TOKENS // WORLD, WIDTH, requires_grad=True),
                           mesh, [Shard(1)])
    compiled = torch.compile(block, fullgraph=True)
    _, codes = run_and_get_code(lambda: compiled(x).to_local().sum().backward())
    wanted = re.compile(r"_c10d_functional\.\w+\.default\(|symm_mem\.\w+\.default\("
                        r"|extern_kernels\.mm\(|cpp_fused\w*(cat|split)\w*\(")
    if whole:
        return list(codes)
    lines = []
    for index, code in enumerate(codes):
        lines.append(f"graph {index}")
        lines += ["  " + line.strip()[:110] for line in code.splitlines()
                  if wanted.search(line) and "async_compile" not in line
                  and "wait_tensor" not in line]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=4, help="local batch (1: views)")
    parser.add_argument("--ac", choices=("none", "full", "op"), default="full",
                        help="activation checkpointing: none, full, TorchTitan's per-op")
    parser.add_argument("--async-tp", action="store_true", help="Inductor's micro-pipeline TP")
    parser.add_argument("--code", action="store_true", help="print the whole generated code")
    args = parser.parse_args()
    print("\n".join(run(args.batch, args.ac, args.async_tp, args.code)))


if __name__ == "__main__":
    main()
