"""What torch.compile saves in TorchTitan's Llama blocks, as dlsched prices it and as the code
runs it, and every TorchTitan time row under TorchTitan's own modules (issue 48; an analysis:
nothing here changes a preset, a ledger row or a prediction).

(1) Memory-bound bytes per token of one transformer layer (TP 1, 8192 tokens, forward,
backward, the per-op rerun, the separate linears' summed input gradients), Llama 3 8B and 70B,
under the ledger's ops (``fused``: Megatron-Core's fused RMSNorm / SwiGLU / bias-dropout-add,
no rotary, ``job.compute.compile_fusion`` when compiled) and under TorchTitan's modules
(``eager``: ``job.compute.eager_ops``, RMSNorm in 8 ATen kernels forward and 16 backward,
rotary by complex multiply, ``repeat_kv``, SwiGLU, the additions; Inductor's groups of them
when compiled, torchtitan ``torchtitan/models/llama/model.py`` and ``models/norms.py`` at
9dec370, ``apply_compile`` per TransformerBlock in ``parallelisms/parallelize_llama.py``).

(2) Every TorchTitan time row with ``ops`` fused (today) or eager (every row, eager and
compiled), h100-hbm2e-96gb refitted by its protocol (one factor on the h100's 16-bit tensor-core
fractions, bisected until torchtitan-2412-t1-8b-fsdp gives its published 5,762 tokens/s), at the
preset's memory efficiency (0.6832, the h100's, fitted on small eager models) or torchao's for
this GPU (0.92: "pointwise triton kernels with large inputs, which would hit about 2.2k GBPS on
Meta's H100 variant", ``torchao/float8/roofline_utils.py``), and with the loss left eager under
compile where the run's TorchTitan leaves it so (9dec370's ``train.py``: "TODO: compiling loss
function causes CUDA errors", the 2412 rows; torchtitan 0.0.2, the 2503 rows' notes). Other
presets (h200, mi300x, b200) are not refitted; other sources do not move.

Run: ``python -m benchmarks.torchtitan_ops_variants`` (about a minute).
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from benchmarks.compile_gain import BASE, gpu_file, rate
from dlsched.job.compute import compile_fusion, layer_costs
from dlsched.job.compute.block_pricing import block_ops, kernel_options, ops_works
from dlsched.job.compute.eager_ops import summed_gradient_bytes, torch_ops
from dlsched.job.compute.op_checkpoint import recomputed_ops
from dlsched.ledger import load_ledger
from dlsched.ledger.predict import job_and_layout
from dlsched.ledger.schema import LedgerRow

FITTED = "torchtitan-2412-t1-8b-fsdp"
LAYER_ROWS = ("torchtitan-2412-t1-8b-fsdp", "torchtitan-2506-asynctp-70b-bf16-vanilla-tp")
METRIC = "tokens_per_s_per_gpu"


def layer_bytes(row: LedgerRow, ops: str, compiled: bool) -> dict[str, float]:
    """Memory-bound bytes per token of one layer of ``row``'s model (TP 1, its sequence, one
    sample): forward, backward, the per-op rerun and the separate linears' gradient sums."""
    job, _ = job_and_layout(row)
    spec = job.spec
    compute = layer_costs.gpu_compute(job.cluster.gpu, "bf16")
    model = layer_costs.rank_decoder(spec, 1, "ring", "flash", 1, "local")
    options = kernel_options(None, compiled, 1, 1, ops)
    layer = dict(block_ops(model, compiled, ops, spec))["h.0"]
    raw = tuple(op for item in model.layers if item.block == "h.0" for op in item.ops)
    rerun = recomputed_ops(spec, torch_ops(raw, spec, compiled) if ops == "eager" else raw,
                           spec.seq)
    if compiled and ops == "fused":
        rerun = compile_fusion.compiled_ops(rerun, cyclic=False)
    out = {}
    for name, pass_ops, backward in (("forward", layer, False), ("backward", layer, True),
                                     ("rerun", rerun, False)):
        seconds = sum(work.gpu_s for work, op in zip(
            ops_works(pass_ops, 1, compute, options, backward), pass_ops, strict=True)
            if op.kind == "elementwise")
        out[name] = seconds * compute.gpu.memory_rate / spec.seq
    out["sums"] = (summed_gradient_bytes(spec.hidden, compiled)
                   if layer_costs.torch_linears(spec, options) else 0.0)
    return out


def variant(rows: list[LedgerRow], folder: Path, ops: str, memory: float,
            eager_loss: bool, tag: int) -> tuple[float, dict[str, float]]:
    """The refitted factor and every row's error (predicted / published - 1)."""
    fitted = next(row for row in rows if row.id == FITTED)
    low, high = 0.5, 1.3
    for step in range(18):
        middle = (low + high) / 2
        gpu = gpu_file(folder, middle, memory, 1000 * tag + step)
        fast = rate(fitted, gpu, ops, eager_loss) > fitted.value(METRIC)
        low, high = (low, middle) if fast else (middle, high)
    factor = (low + high) / 2
    gpu = gpu_file(folder, factor, memory, 1000 * tag + 999)
    errors = {row.id: rate(row, gpu if row.hardware.gpu == "h100-hbm2e-96gb" else None,
                           ops, eager_loss) / row.value(METRIC) - 1 for row in rows}
    return factor, errors


def summary(errors: list[float]) -> str:
    """Mean |error| and bias, in %."""
    return (f"{100 * statistics.mean(abs(e) for e in errors):5.2f}% / "
            f"{100 * statistics.mean(errors):+6.2f}%")


def main() -> None:
    ledger = {row.id: row for row in load_ledger()}
    print("(1) Memory-bound bytes per token of one layer (kB; TP 1, one sample of 8192 tokens)")
    for row_id in LAYER_ROWS:
        spec = job_and_layout(ledger[row_id])[0].spec
        print(f"  {row_id}: hidden {spec.hidden}, FFN {spec.ffn_hidden}, heads {spec.heads}, "
              f"KV heads {spec.kv_heads}")
        for ops in ("fused", "eager"):
            for compiled in (False, True):
                part = layer_bytes(ledger[row_id], ops, compiled)
                total = sum(part.values())
                print(f"    ops {ops:5s} {'compiled' if compiled else 'eager   '}: forward "
                      f"{part['forward'] / 1e3:6.1f}, backward {part['backward'] / 1e3:6.1f}, "
                      f"per-op rerun {part['rerun'] / 1e3:6.1f}, gradient sums "
                      f"{part['sums'] / 1e3:5.1f}; total {total / 1e3:6.1f} "
                      f"({total / spec.hidden:5.1f} B per hidden element)")
    rows = [row for row in ledger.values() if row.source == "torchtitan" and row.supported
            and row.value(METRIC) is not None]
    cases = (("fused", BASE["memory_efficiency"], False), ("eager", BASE["memory_efficiency"],
             False), ("eager", BASE["memory_efficiency"], True), ("fused", 0.92, False),
             ("eager", 0.92, False), ("eager", 0.92, True))
    results = []
    with tempfile.TemporaryDirectory() as name:
        for tag, (ops, memory, eager_loss) in enumerate(cases):
            results.append(variant(rows, Path(name), ops, memory, eager_loss, tag))
    print("\n(2) Every TorchTitan time row (%), h100-hbm2e-96gb refitted on t1 per case")
    heads = [f"{ops} {memory:g}{' +loss' if loss else ''}" for ops, memory, loss in cases]
    print(f"  {'row':52s}" + "".join(f"{head:>20s}" for head in heads))
    for row in rows:
        print(f"  {row.id[11:]:52s}" + "".join(f"{100 * errors[row.id]:+20.1f}"
                                               for _, errors in results))
    print(f"  {'factor':52s}" + "".join(f"{factor:20.4f}" for factor, _ in results))
    fp8 = [row.id for row in rows if row.parallel.precision == "fp8"]
    compiled_h100 = [row.id for row in rows if row.parallel.torch_compile
                     and row.hardware.gpu == "h100-hbm2e-96gb"]
    for label, ids in (("all rows", [row.id for row in rows]), ("FP8 rows", fp8),
                       ("compiled h100-hbm2e-96gb rows", compiled_h100)):
        print(f"  {label + ': |error| / bias':52s}" + "".join(
            f"{summary([errors[i] for i in ids]):>20s}" for _, errors in results))


if __name__ == "__main__":
    main()
