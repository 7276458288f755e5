"""GPU compute: measured vs predicted training steps of zoo models on the local GPU.

For each zoo model it can build (torchvision's ResNet-50/152 and VGG-16, Hugging Face's
BertModel and GPT2Model when those packages are installed) and each precision — fp32 (TF32
off), tf32, bf16 (``torch.autocast``) and, for convolutional models, bf16 with channels-last —
it times one step as ``shared/reference/gpu-measurements.md`` did (forward + backward of
``loss = output.float().pow(2).mean()``, gradients set to None, median of ``STEPS`` steps after
``WARMUP``, CUDA events) and sets it beside ``dlsched compute``'s prediction on the calibrated
preset of the GPU (``h200``, ``h100``, ``a100`` or ``v100`` from the device name, or
``--preset``).
Cases the preset was fitted to are marked; the rest are held out.

Run: ``python -m benchmarks.bench_gpu_compute [--preset NAME] [--models a,b]`` on a machine
with a CUDA GPU (rewrites its section of BENCHMARKS.md, naming the device). Without torch or a
GPU it prints why and exits 0 without writing anything.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from typing import Any

from benchmarks.common import write_section
from dlsched.training.step import step_row

STEPS, WARMUP = 20, 8
PRECISIONS = ("fp32", "tf32", "bf16")
CONV_MODELS = ("resnet50", "resnet152", "vgg16")
BATCHES = {"resnet50": (32, 256), "resnet152": (32, 128), "vgg16": (32, 128),
           "bert-base": (32, 128), "gpt2": (8,)}
# (model, batch, precision, channels_last) of the steps the h100 preset was fitted to
# (presets/calibration-h100.yaml).
_CONV = (("fp32", False), ("tf32", False), ("bf16", False), ("bf16", True))
FITTED = ({("resnet50", b, p, cl) for b in (32, 256) for p, cl in _CONV}
          | {(m, 32, p, cl) for m in ("resnet152", "vgg16") for p, cl in _CONV}
          | {(m, b, p, False) for m, b in (("gpt2", 8), ("bert-base", 32)) for p in PRECISIONS})


@dataclass(frozen=True)
class Case:
    """One measured setting."""

    model: str
    batch_size: int
    precision: str
    channels_last: bool = False

    @property
    def label(self) -> str:
        """``resnet50 b256 bf16+channels_last``."""
        return (f"{self.model} b{self.batch_size} {self.precision}"
                f"{'+channels_last' if self.channels_last else ''}")


def cases(models: list[str]) -> list[Case]:
    """Every (model, batch, precision, layout) the benchmark runs for ``models``."""
    out = []
    for model in models:
        for batch in BATCHES[model]:
            out += [Case(model, batch, precision) for precision in PRECISIONS]
            if model in CONV_MODELS:
                out.append(Case(model, batch, "bf16", channels_last=True))
    return out


def preset_for(device_name: str) -> str | None:
    """The calibrated preset of a CUDA device name (``NVIDIA H100 80GB HBM3`` -> h100)."""
    from dlsched.hardware.gpu import preset_for as bundled

    return bundled(device_name)


def predicted(case: Case, preset: str) -> dict[str, Any]:
    """``dlsched compute``'s row for a case (GPT-2 without its LM head: GPT2Model)."""
    return step_row(case.model, case.batch_size, preset, case.precision, case.channels_last,
                    lm_head=case.model != "gpt2")


def section(device_name: str, preset: str, rows: list[dict[str, Any]]) -> str:
    """The BENCHMARKS.md section: one line per case, errors of held-out cases summarized."""
    lines = [f"## GPU compute: measured vs predicted steps ({device_name})", "",
             f"`python -m benchmarks.bench_gpu_compute`: forward + backward of one step, "
             f"median of {STEPS} after {WARMUP} warm-up (CUDA events), against `dlsched "
             f"compute` on the `{preset}` preset. fitted = a case the preset was fitted to.",
             "", "| case | measured (ms) | predicted (ms) | error (%) | fitted |",
             "|---|---:|---:|---:|---|"]
    for row in rows:
        lines.append(f"| {row['case']} | {row['measured_s'] * 1e3:.1f} | "
                     f"{row['predicted_s'] * 1e3:.1f} | {row['error'] * 100:+.1f} | "
                     f"{'yes' if row['fitted'] else 'no'} |")
    held = [abs(row["error"]) for row in rows if not row["fitted"]]
    if held:
        lines += ["", f"Held-out cases: {sum(e <= 0.25 for e in held)} of {len(held)} within "
                      f"25%, worst {max(held):.1%}."]
    return "\n".join(lines)


def _build(model: str) -> tuple[Any, Any]:
    """(module, input factory taking the batch size) of a zoo model; ImportError when its
    package is missing."""
    import torch

    if model in CONV_MODELS:
        import torchvision

        net = getattr(torchvision.models, model)(weights=None)
        return net, lambda b: torch.randn(b, 3, 224, 224)
    import transformers

    if model == "bert-base":
        net = transformers.BertModel(transformers.BertConfig())
        return net, lambda b: torch.randint(0, 30522, (b, 128))
    net = transformers.GPT2Model(transformers.GPT2Config())
    return net, lambda b: torch.randint(0, 50257, (b, 1024))


def measure(case: Case) -> float:
    """Median seconds of one training step of ``case`` on the current CUDA device."""
    import torch

    net, make_input = _build(case.model)
    torch.backends.cuda.matmul.allow_tf32 = case.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = case.precision == "tf32"
    memory_format = torch.channels_last if case.channels_last else torch.contiguous_format
    net = net.cuda().to(memory_format=memory_format)
    data = make_input(case.batch_size).cuda()
    if data.dim() == 4:
        data = data.to(memory_format=memory_format)
    times = []
    for step in range(WARMUP + STEPS):
        for parameter in net.parameters():
            parameter.grad = None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=case.precision == "bf16"):
            output = net(data)
        output = output if torch.is_tensor(output) else output.last_hidden_state
        output.float().pow(2).mean().backward()
        end.record()
        torch.cuda.synchronize()
        if step >= WARMUP:
            times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main() -> None:
    """Measure, predict, write the section (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", help="Calibrated preset (default: from the device name).")
    parser.add_argument("--models", default=",".join(BATCHES))
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed (needs torch with CUDA and a GPU)")
        return
    if not torch.cuda.is_available():
        print("skipped: no CUDA GPU on this machine (torch.cuda.is_available() is False)")
        return
    name = torch.cuda.get_device_name()
    preset = args.preset or preset_for(name)
    if preset is None:
        print(f"skipped: no calibrated preset for {name!r}; pass --preset v100|a100|h100|h200")
        return
    rows = []
    for case in cases([m.strip() for m in args.models.split(",") if m.strip()]):
        try:
            seconds = measure(case)
        except ImportError as error:
            print(f"skipped {case.label}: {error}")
            continue
        guess = predicted(case, preset)["step_s"]
        fitted = preset in ("h100", "h200") and (case.model, case.batch_size, case.precision,
                                       case.channels_last) in FITTED
        rows.append({"case": case.label, "measured_s": seconds, "predicted_s": guess,
                     "error": guess / seconds - 1, "fitted": fitted})
        print(f"{case.label}: measured {seconds * 1e3:.1f} ms, predicted {guess * 1e3:.1f} ms")
    if rows:
        write_section("gpu_compute", section(name, preset, rows))
        print("wrote the gpu_compute section of BENCHMARKS.md")


if __name__ == "__main__":
    main()
