"""Which mispriced part of the vTrain single-node iterations reorders the layouts
(docs/validation.md, "vTrain's single-node measured layouts", issue 49): an analysis, not a
calibration; nothing here changes the evaluator or a preset.

1. **Term substitution.** ``vtrain.decomposition`` reads four parts off the one-stage (PP 1)
   rows, measured and predicted, per hidden size, TP degree and microbatch size: ``a`` one layer
   x one microbatch, ``b`` the rest of a microbatch (embedding, head, loss), ``c`` one layer's
   share of the iteration's end, ``d`` the iteration's fixed cost. Each row is re-scored with
   one part at its measured value: predicted + (measured - predicted) x the part's count. The
   counts are exact for PP 1 (m L, m, L, 1; m microbatches per replica, L layers); for PP 2 and
   4 they are 1F1B's critical path through one stage, (m + pp - 1) L / pp, m + pp - 1, L / pp
   and 1 (an approximation: the stage that carries the head is taken as the slowest).
   Microbatch 8 rows are left as priced (the part is not determined there).
2. **The groups still mis-ranked**: per group whose first-ranked layout measures more than 3%
   slower than the best measured one, the hidden size and the two layouts, counted by pair.
3. **The TP all-reduce as these runs paid it, read off the measurements with no model.** A
   layer at TP t with microbatch t m runs the same GEMM FLOPs, the same attention-core work
   (t times the sequences, 1/t of the heads) and the same kernel launches per GPU as at TP 1
   with microbatch m; it adds the replicated LayerNorms and residual adds of the extra
   sequences (the evaluator's GPU time gives that difference) and six blocking all-reduces of
   the t m x sequence x hidden x 2 B activation (two in the forward, two in the recomputed
   forward, two in the backward: Megatron's TP layer without sequence parallelism). So
   (a(t, t m) - a(1, m) - the evaluator's GPU-time difference) / 6 is one all-reduce's cost
   inside a training step, set beside vTrain's nccl-tests table for the same size and GPU count
   (``experiments/data/vtrain_a100_allreduce_*gpu.csv``) and the evaluator's own price.

Run: ``python -m benchmarks.vtrain_term_sensitivity`` (about 5 s).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from benchmarks.vtrain_tp_sensitivity import measured_s, modelled_s
from dlsched.experiments import vtrain
from dlsched.experiments.layout_ranking import error_summary, groups, ranking_summary
from dlsched.job.compute.block_pricing import layer_halves
from dlsched.job.compute.layer_costs import EAGER_16BIT, decoder_model, gpu_compute

TERMS = vtrain.TERMS
LABELS = dict(zip(TERMS, ("a: layer x microbatch", "b: microbatch", "c: layer",
                          "d: iteration"), strict=True))
ALL_REDUCES_PER_LAYER = 6  # forward 2, recomputed forward 2, backward 2 (module docstring)


def counts(row: dict[str, Any], layers: int) -> dict[str, float]:
    """How many times each part enters ``row``'s iteration (module docstring, item 1)."""
    m = row["global_batch"] // (row["dp"] * row["microbatch"])
    pp = row["pp"]
    return dict(zip(TERMS, ((m + pp - 1) * layers / pp, m + pp - 1, layers / pp, 1.0),
                    strict=True))


def substituted(rows: list[dict[str, Any]], terms: tuple[str, ...]) -> list[dict[str, Any]]:
    """``rows`` re-scored with ``terms`` at their measured values (module docstring)."""
    shapes = {row.model: row for row in vtrain.load_rows()}  # hidden size, layers per model
    parts = {(p["hidden"], p["tp"], p["microbatch"]): p
             for p in vtrain.decomposition(rows) if p["measured"] is not None}
    out = []
    for row in rows:
        shape = shapes[row["model"]]
        part = parts.get((shape.hidden, row["tp"], row["microbatch"]))
        predicted = row["predicted_s"]
        if part is not None:
            weight = counts(row, shape.layers)
            predicted += sum((part["measured"][t] - part["predicted"][t]) * weight[t]
                             for t in terms)
        out.append({**row, "predicted_s": predicted,
                    "error": predicted / row["measured_s"] - 1})
    return out


def line(name: str, rows: list[dict[str, Any]]) -> str:
    """Errors and ranking over all rows and over the hidden-2048 groups."""
    errors = error_summary(rows)
    ranks = ranking_summary(groups(rows, vtrain.group_key))
    wide = ranking_summary(groups([r for r in rows if r["model"].startswith("h2048")],
                                  vtrain.group_key))
    return (f"{name:34s} |error| {errors['mean_abs_error']:.1%}, bias {errors['bias']:+.1%}, "
            f"tau {ranks['mean_kendall_tau']:.3f}, first within 3% / 5%: "
            f"{ranks['first_within_3pct']} / {ranks['first_within_5pct']}; hidden 2048: tau "
            f"{wide['mean_kendall_tau']:.3f}, {wide['first_within_3pct']} of {wide['groups']}")


def layout(row: dict[str, Any]) -> str:
    """``TP 2, PP 1, mb 4``: a priced row's layout."""
    return f"TP {row['tp']}, PP {row['pp']}, mb {row['microbatch']}"


def misranked(rows: list[dict[str, Any]]) -> Counter[tuple[str, str, str]]:
    """(hidden, best measured layout, first-ranked layout) counted over the groups whose
    first-ranked layout measures more than 3% slower than the best measured one."""
    found: Counter[tuple[str, str, str]] = Counter()
    for group in groups(rows, vtrain.group_key):
        best = min(group, key=lambda r: r["measured_s"])
        first = min(group, key=lambda r: r["predicted_s"])
        if first["measured_s"] > 1.03 * best["measured_s"]:
            found[(group[0]["model"].split("-")[0], layout(best), layout(first))] += 1
    return found


def layer_gpu_s(row: vtrain.VTrainRow, tp: int, microbatch: int) -> float:
    """The evaluator's GPU seconds of one layer's forward, recomputed forward and backward at
    ``tp`` and ``microbatch`` (``row``'s shape; no launches, no collectives)."""
    job = vtrain.job(row)
    model = decoder_model(job.spec, 1, 1, "ring", vtrain.ATTENTION)
    gpu_f, _, gpu_b, _ = layer_halves(model, microbatch, gpu_compute("a100", "fp16", tp),
                                      EAGER_16BIT, job.spec)
    return 2 * gpu_f + gpu_b


def all_reduce_in_training(rows: list[dict[str, Any]]) -> list[str]:
    """Module docstring, item 3: one line per (hidden, TP t, microbatch m at TP 1) pair that
    the one-stage rows determine."""
    parts = {(p["hidden"], p["tp"], p["microbatch"]): p["measured"]["per_layer_microbatch_s"]
             for p in vtrain.decomposition(rows) if p["measured"] is not None}
    shapes = {row.hidden: row for row in vtrain.load_rows()}  # one row of each hidden size
    lines = []
    for (hidden, tp, microbatch), a in sorted(parts.items()):
        base = parts.get((hidden, 1, microbatch // tp)) if microbatch % tp == 0 else None
        if tp == 1 or base is None:
            continue
        shape = shapes[hidden]
        extra_gpu = (layer_gpu_s(shape, tp, microbatch)
                     - layer_gpu_s(shape, 1, microbatch // tp))
        each = (a - base - extra_gpu) / ALL_REDUCES_PER_LAYER
        size = microbatch * shape.seq * hidden * 2
        lines.append(f"  hidden {hidden}, TP {tp} mb {microbatch} vs TP 1 mb "
                     f"{microbatch // tp}: a {a * 1e3:.2f} - {base * 1e3:.2f} ms, GPU "
                     f"+{extra_gpu * 1e3:.2f} ms -> {each * 1e6:.0f} us per all-reduce of "
                     f"{size / 2**20:.0f} MiB on {tp} GPUs (nccl-tests "
                     f"{measured_s(tp, size) * 1e6:.0f} us, dlsched "
                     f"{modelled_s(tp, size) * 1e6:.0f} us)")
    return lines


def main() -> None:
    """Print the three readings of the module docstring."""
    rows = [vtrain.price(row, index=i) for i, row in enumerate(vtrain.load_rows())]
    print("1. each part at its measured value (PP 1 exact, PP 2-4 by 1F1B's counts):")
    print(line("as priced", rows))
    for term in TERMS:
        print(line(LABELS[term], substituted(rows, (term,))))
    print(line("a and b", substituted(rows, TERMS[:2])))
    print("2. groups whose first-ranked layout is > 3% slower than the best measured "
          "(hidden, best measured, ranked first):")
    for (hidden, best, first), n in misranked(rows).most_common():
        print(f"  {n:3d}  {hidden}: {best} best, {first} first")
    print("3. one TP all-reduce inside a training step, from the measurements:")
    print("\n".join(all_reduce_in_training(rows)))


if __name__ == "__main__":
    main()
