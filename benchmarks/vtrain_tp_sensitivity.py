"""Sensitivity of the vTrain single-node errors (docs/validation.md, "vTrain's single-node
measured layouts") to the tensor-parallel all-reduce's price: the job evaluator's all-reduce
curve for a TP group of the ``dgx-a100`` node beside the NCCL times vTrain measured on A100s
(``experiments/data/vtrain_a100_allreduce_*gpu.csv``, nccl-tests tables: the mean of the
out-of-place and in-place times), and the vTrain rows re-scored with each row's exposed TP time
scaled by the measured / modelled ratio at its message size (microbatch x sequence x hidden x
2 B; every TP all-reduce of these GPT layers has that size). An analysis, not a calibration:
nothing here changes the evaluator or a preset.

Run: ``python -m benchmarks.vtrain_tp_sensitivity`` (about 5 s).
"""

from __future__ import annotations

import csv
import io
from importlib import resources

import numpy as np

from dlsched.experiments import vtrain
from dlsched.experiments.layout_ranking import by, error_summary, groups, ranking_summary
from dlsched.job.cluster import load_cluster
from dlsched.job.communication.collective_costs import curve
from dlsched.job.evaluation.evaluate import evaluate

SIZES_MIB = (1, 4, 16, 64)


def nccl_table(gpus: int) -> tuple[np.ndarray, np.ndarray]:
    """(bytes, seconds) of vTrain's A100 all-reduce table for ``gpus`` GPUs."""
    name = f"vtrain_a100_allreduce_{gpus}gpu.csv"
    text = resources.files("dlsched.experiments").joinpath("data", name).read_text()
    rows = list(csv.reader(io.StringIO(text)))[1:]
    sizes = np.array([int(r[0]) for r in rows], float)
    seconds = np.array([(float(r[3]) + float(r[5])) / 2e9 for r in rows])
    return sizes, seconds


def measured_s(gpus: int, size: float) -> float:
    """NCCL's time for a ``size``-byte all-reduce on ``gpus`` A100s (interpolated; the 1 MiB
    time below 1 MiB)."""
    sizes, seconds = nccl_table(gpus)
    return float(np.interp(size, sizes, seconds))


def modelled_s(gpus: int, size: float) -> float:
    """The evaluator's all-reduce time on a TP group of ``gpus`` GPUs of one dgx-a100 node."""
    group = load_cluster("dgx-a100", 8, "a100").group_topology(1, gpus)
    return curve(group, "all-reduce", "baseline").seconds(size)


def rescored() -> tuple[list[dict], list[dict]]:
    """Every vTrain row as priced, and with its exposed TP time scaled to NCCL's."""
    base, scaled = [], []
    for index, row in enumerate(vtrain.load_rows()):
        result = evaluate(vtrain.job(row), row.layout())
        priced = vtrain.price(row, index=index)
        ratio = 1.0
        if row.tp > 1:
            size = row.microbatch * row.seq * row.hidden * 2
            ratio = measured_s(row.tp, size) / modelled_s(row.tp, size)
        tp_s = result.exposed.get("tp_s", 0.0)
        base.append(priced)
        scaled.append({**priced, "predicted_s": result.iteration_s + tp_s * (ratio - 1)})
    return base, scaled


def main() -> None:
    print("all-reduce on one A100 node, dlsched / NCCL (us):")
    for gpus in (2, 4, 8):
        cells = [f"{mib} MiB {modelled_s(gpus, mib * 2**20) * 1e6:.1f} / "
                 f"{measured_s(gpus, mib * 2**20) * 1e6:.1f}" for mib in SIZES_MIB]
        print(f"  {gpus} GPUs: " + ", ".join(cells))
    for name, rows in zip(("as priced", "TP at NCCL's times"), rescored(), strict=True):
        errors = error_summary(rows)
        ranks = ranking_summary(groups(rows, vtrain.group_key))
        tp = ", ".join(f"TP {g['tp']} {g['bias']:+.1%}" for g in by(rows, "tp"))
        mb = ", ".join(f"mb {g['microbatch']} {g['bias']:+.1%}" for g in by(rows, "microbatch"))
        print(f"{name}: mean |error| {errors['mean_abs_error']:.1%}, bias {errors['bias']:+.1%}; "
              f"{tp}; {mb}; mean tau {ranks['mean_kendall_tau']:.3f}; first within 3% / 5%: "
              f"{ranks['first_within_3pct']} / {ranks['first_within_5pct']} of "
              f"{ranks['groups']}")


if __name__ == "__main__":
    main()
