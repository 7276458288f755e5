"""``dlsched reproduce attention``: cuDNN's fused attention priced by its tiles beside NVIDIA's
published timings of it (``dlsched.experiments.attention_reproduction``)."""

from __future__ import annotations

import typer

from dlsched.cli.scenario_runs import Reproduction, reproduction_command


@reproduction_command
def reproduce_attention(*, run: Reproduction) -> None:
    """cuDNN's fused attention (Transformer Engine's FusedAttention) on H200, GB200 and GB300:
    each published forward and backward time beside the evaluator's, the errors per shape
    (fitted: Llama 3.1 and GPT-OSS to 16k tokens, cuDNN 9.19; held out: 32k tokens, cuDNN 9.22
    and five other models' shapes), the kernel constants refitted from the data beside the
    presets', and FlashAttention-3's H100 figures as a check. A few seconds."""
    from dlsched.experiments import attention_reproduction

    run.show(attention_reproduction)


def register(app: typer.Typer, reproduce: typer.Typer) -> None:
    """Add ``reproduce attention``."""
    reproduce.command("attention")(reproduce_attention)
