"""``dlsched reproduce attention``: cuDNN's fused attention as the evaluator prices it beside
NVIDIA's published timings of it (``experiments.cudnn_attention``: the data, the fit and the
held-out check), per GPU and attention shape, with the constants refitted from the data next
to the presets' and FlashAttention-3's H100 figures for cuDNN as a check on another GPU and
cuDNN version."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dlsched.experiments.cudnn_attention import (
    FIT_CONFIG,
    FIT_MAX_QUERIES,
    MEASURED_GPUS,
    Timing,
    fit_kernel,
    load_timings,
    predicted_seconds,
)
from dlsched.hardware.gpu import get_gpu
from dlsched.report import Column
from dlsched.report.columns import percents
from dlsched.report.sections import Paragraph, Section, Table
from dlsched.report.tables import fixed, in_percent

NAME = "attention"
SOURCE = ("NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training results (3929da2; the "
          "GB200 / GB300 cuDNN 9.19 ones at fb682ce), bundled as experiments/data/"
          "cudnn_sdpa_training.csv with its .source.yaml")
# FlashAttention-3 (Shah et al., 2024), Figs. 5-6: cuDNN on an H100 SXM5, BF16, head dimension
# 128, causal, 8,192 tokens at 16k tokens a batch (2 sequences) of 16 heads: TFLOP/s.
FA3_H100 = {False: 529.0, True: 518.0}


@dataclass(frozen=True)
class Scenario:
    """One measured GPU's published timings."""

    gpu: str


def scenarios(options: None = None) -> list[Scenario]:
    """One scenario per GPU with published timings."""
    return [Scenario(gpu) for gpu in MEASURED_GPUS]


def _row(timing: Timing) -> dict[str, Any]:
    predicted = predicted_seconds(timing, get_gpu(timing.gpu))
    return {"gpu": timing.gpu, "config": timing.config,
            "mask": "causal" if timing.causal else "full", "batch": timing.batch,
            "tokens": timing.queries, "heads": timing.q_heads,
            "head_dim": f"{timing.head_dim_qk}/{timing.head_dim_vo}",
            "window": timing.window, "pass": "backward" if timing.backward else "forward",
            "cudnn": timing.cudnn, "fitted": timing.fitted, "measured_s": timing.seconds,
            "predicted_s": predicted, "error": predicted / timing.seconds - 1}


def run_scenario(scenario: Scenario) -> list[dict[str, Any]]:
    """Every published timing of the GPU, priced with its preset."""
    return [_row(t) for t in load_timings() if t.gpu == scenario.gpu]


def _errors(rows: list[dict[str, Any]]) -> dict[str, Any]:
    errors = [r["error"] for r in rows]
    return {"timings": len(rows), "mean_abs_error": float(np.mean(np.abs(errors))),
            "bias": float(np.mean(errors)), "worst": max(errors, key=abs)}


def _checks(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for gpu in dict.fromkeys(r["gpu"] for r in rows):
        for config in dict.fromkeys(r["config"] for r in rows if r["gpu"] == gpu):
            for cudnn in sorted({r["cudnn"] for r in rows
                                 if r["gpu"] == gpu and r["config"] == config}):
                for fitted in (True, False):
                    group = [r for r in rows if (r["gpu"], r["config"], r["cudnn"],
                                                 r["fitted"]) == (gpu, config, cudnn, fitted)]
                    if group:
                        out.append({"gpu": gpu, "config": config, "cudnn": cudnn,
                                    "set": "fitted" if fitted else "held out",
                                    **_errors(group)})
    return out


def _constants() -> list[dict[str, Any]]:
    """Per measured GPU, the constants refitted now beside the preset's."""
    out = []
    for gpu in MEASURED_GPUS:
        fit, spec = fit_kernel(gpu), get_gpu(gpu).spec
        kernel = spec.fused_attention_kernel
        assert kernel is not None  # every measured preset has the block
        for source, forward, block in (("refit", fit.forward_efficiency, fit.kernel),
                                       ("preset", spec.efficiency["fused_attention"].bf16,
                                        kernel)):
            out.append({"gpu": gpu, "source": source, "forward": forward,
                        "backward": block.backward,
                        **{f"{name}_{p}": getattr(block, name).of(p == "b")
                           for name in ("query_tile", "diagonal", "head_dim_64")
                           for p in ("f", "b")}})
    return out


def fa3_check() -> list[dict[str, Any]]:
    """FlashAttention-3's cuDNN rates on an H100 against the h100 preset's (same shape)."""
    out = []
    for backward, published in FA3_H100.items():
        timing = Timing("h100", "fa3", True, 2, 8192, 8192, 16, 16, 128, 128, 0, backward,
                        1.0, 0)
        flop = 4 * 2 * 16 * 8192**2 * 128 / 2 * (2.5 if backward else 1.0)
        rate = flop / predicted_seconds(timing, get_gpu("h100"))
        out.append({"pass": "backward" if backward else "forward",
                    "published_tflops": published, "predicted_tflops": rate / 1e12,
                    "error": published / (rate / 1e12) - 1})
    return out


def document(rows: list[dict[str, Any]], options: None = None) -> dict[str, Any]:
    """What ``--json`` prints: the totals of the fitted and the held-out timings, per GPU,
    shape and cuDNN version, the constants, the FlashAttention-3 check, then every row."""
    fitted = [r for r in rows if r["fitted"]]
    held = [r for r in rows if not r["fitted"]]
    return {"fitted": _errors(fitted) if fitted else None,
            "held_out": _errors(held) if held else None,
            "checks": _checks(rows), "constants": _constants(), "fa3_h100": fa3_check(),
            "rows": rows}


_SIGNED = in_percent(1, signed=True)
CHECK_COLUMNS = [Column("gpu", "GPU", justify="left"), Column("config", "shape", justify="left"),
                 Column("cudnn", "cuDNN"), Column("set", "set", justify="left"),
                 Column("timings", "timings"),
                 *percents(in_percent(1), mean_abs_error="|error|"),
                 *percents(_SIGNED, bias="bias", worst="worst")]
CONSTANT_COLUMNS = [Column("gpu", "GPU", justify="left"),
                    Column("source", "source", justify="left"),
                    Column("forward", "forward rate (of peak)", fixed(4)),
                    Column("backward", "backward / forward", fixed(4)),
                    *(Column(f"{name}_{p}", f"{label} {p}", fixed(3))
                      for name, label in (("query_tile", "query tile (tiles)"),
                                          ("diagonal", "diagonal (tiles)"),
                                          ("head_dim_64", "head dim 64 (rate)"))
                      for p in ("f", "b"))]
FA3_COLUMNS = [Column("pass", "pass", justify="left"),
               Column("published_tflops", "FA3 cuDNN (TFLOP/s)", fixed(0)),
               Column("predicted_tflops", "h100 preset (TFLOP/s)", fixed(0)),
               *percents(_SIGNED, error="error, time")]


def sections(document_: dict[str, Any], options: None = None) -> list[Section]:
    """The per-shape errors, the constants, the FlashAttention-3 check and the source."""
    fitted, held = document_["fitted"], document_["held_out"]
    return [
        Table(document_["checks"], CHECK_COLUMNS,
              "cuDNN fused attention, predicted (models.fused_attention with each GPU's "
              "preset) against NVIDIA's published time of each pass: error = predicted / "
              f"measured - 1; fitted on {FIT_CONFIG} and gpt_oss up to {FIT_MAX_QUERIES:,} "
              "tokens with cuDNN 9.19 (91901), everything else held out"),
        Paragraph(f"fitted: {fitted['timings']} timings, mean |error| "
                  f"{fitted['mean_abs_error']:.1%}; held out: {held['timings']} timings, mean "
                  f"|error| {held['mean_abs_error']:.1%}, bias {held['bias']:+.1%}"),
        Table(document_["constants"], CONSTANT_COLUMNS,
              "the kernel's constants fitted now on the bundled timings beside the presets' "
              "(hardware.attention_kernel; tiles: one 128 x 128 score tile's time of the pass)"),
        Table(document_["fa3_h100"], FA3_COLUMNS,
              "H100 SXM5, a GPU and cuDNN version (2024) outside the fit: FlashAttention-3's "
              "Figs. 5-6 for cuDNN, causal, 8,192 tokens, 2 x 16 heads of 128 (TFLOP/s; error = "
              "predicted / published time - 1)"),
        Paragraph(f"source: {SOURCE}")]
