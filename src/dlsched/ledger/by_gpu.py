"""``dlsched validate``'s per-GPU summary: each GPU generation of the ledger scored apart, with
how its compute constants were obtained.

Per ledger GPU (``schema.Hardware.gpu``) and family (time, memory): the compute preset it is
priced with (``predict.GPU_PRESETS``), the rows, how many are priced, the mean absolute and
signed error of the scored predictions, the held-out mean absolute error, and the provenance
of the constant that dominates a transformer's time, the 16-bit GEMM efficiency
(``efficiency.gemm.bf16``: ``fitted`` names the ledger row it was fitted on, the others held
out), with the count of the preset's constants by provenance (``hardware.gpu.PROVENANCES``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dlsched.hardware.gpu import PROVENANCES, get_gpu
from dlsched.ledger import load_ledger
from dlsched.ledger.predict import FITTED_ROWS, GPU_PRESETS, MEMORY_METRICS

GEMM_KEY = "efficiency.gemm.bf16"


def provenance_of(preset: str, constant: str) -> str:
    """How ``constant`` (a dotted name, e.g. ``efficiency.gemm.bf16``) of GPU ``preset`` was
    obtained: its own ``provenance`` entry or the nearest enclosing one (``unstated`` if
    none)."""
    table = get_gpu(preset).spec.provenance
    parts = constant.split(".")
    for end in range(len(parts), 0, -1):
        key = ".".join(parts[:end])
        if key in table:
            return table[key]
    return "unstated"


def provenance_counts(preset: str) -> str:
    """The preset's provenance entries counted by kind, e.g. ``datasheet 4, measured 9``."""
    values = list(get_gpu(preset).spec.provenance.values())
    return ", ".join(f"{kind} {values.count(kind)}" for kind in PROVENANCES
                     if values.count(kind))


def gemm_provenance(gpu: str, preset: str) -> str:
    """The 16-bit GEMM efficiency's provenance, with the ledger row it was fitted on."""
    kind = provenance_of(preset, GEMM_KEY)
    if kind != "fitted":
        return kind
    rows = {row.id: row.hardware.gpu for row in load_ledger()}
    fitted = sorted(row_id for row_id in FITTED_ROWS if rows.get(row_id) == gpu)
    return f"fitted: {', '.join(fitted)}" if fitted else "fitted (not on a ledger row)"


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def gpu_summary(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per ledger GPU and family present in ``records`` (``report.record``'s),
    in ``GPU_PRESETS`` order then by family (module docstring)."""
    gpu_of = {row.id: row.hardware.gpu for row in load_ledger()}
    out = []
    for gpu, (_, preset) in GPU_PRESETS.items():
        mine = [r for r in records if gpu_of.get(r["id"]) == gpu]
        for family in ("time", "memory"):
            rows = [r for r in mine if (r["metric"] in MEMORY_METRICS) == (family == "memory")]
            if not rows:
                continue
            scored = [r for r in rows if r["scored"] and r["error"] is not None]
            held = [r["error"] for r in scored if r["held_out"]]
            out.append({
                "gpu": gpu, "preset": preset, "description": get_gpu(preset).spec.description,
                "family": family, "rows": len({r["id"] for r in rows}),
                "priced": len({r["id"] for r in scored}),
                "mean_abs_error": _mean([abs(r["error"]) for r in scored]),
                "mean_signed_error": _mean([r["error"] for r in scored]),
                "held_out_mean_abs_error": _mean([abs(e) for e in held]),
                "gemm_provenance": gemm_provenance(gpu, preset),
                "provenance": provenance_counts(preset)})
    return out
