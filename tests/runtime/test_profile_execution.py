"""Profiles on a chosen device and precision: autocast, channels-last, CUDA refused in one line
without a GPU, and parameters the loss never reaches (a BertModel-like pooler) skipped as
DDP's find_unused_parameters runs them or refused; the profiles feed the planners unchanged."""

from __future__ import annotations

import json
from collections import OrderedDict
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="optional torch extra not installed")

from torch import nn  # noqa: E402

from dlsched.errors import ConfigError  # noqa: E402
from dlsched.runtime.dataparallel.profile import profile, unused_parameters, write_profile  # noqa: E402
from dlsched.runtime.execution import Execution  # noqa: E402
from dlsched.runtime.pipeline.model import PipelineModel  # noqa: E402
from dlsched.runtime.pipeline.profile import chain_document, profile_blocks  # noqa: E402

UNUSED = ["pooler.weight", "pooler.bias", "never.weight", "never.bias"]


class WithPooler(nn.Module):
    """Like Hugging Face's BertModel: returns (hidden states, pooled first token); a loss on
    the hidden states gives the pooler no gradient. ``never`` is not called at all. Records
    the dtype its body computes in (autocast check)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.pooler = nn.Linear(8, 8)
        self.never = nn.Linear(8, 8)
        self.seen: torch.dtype | None = None

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = torch.relu(self.body(x))
        self.seen = hidden.dtype
        return hidden, torch.tanh(self.pooler(hidden[:, 0]))


def hidden_loss(output: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """A loss on the hidden states only (``last_hidden_state``)."""
    return output[0].float().pow(2).mean()


def _example() -> tuple[WithPooler, torch.Tensor]:
    torch.manual_seed(0)
    return WithPooler(), torch.randn(4, 3, 8)


def test_unused_parameters_are_found() -> None:
    """The pooler (runs, no gradient) and the module never called are listed, in order."""
    module, x = _example()
    assert unused_parameters(module, x, hidden_loss) == UNUSED
    assert all(p.grad is None for p in module.parameters())


def test_unused_error_names_the_parameter() -> None:
    """--unused error refuses the module, naming the first parameter without a gradient."""
    module, x = _example()
    with pytest.raises(ConfigError, match=r"parameter pooler\.weight gets no gradient"):
        profile(module, x, loss_fn=hidden_loss, warmup=0, repeats=1,
                execution=Execution(unused="error"))


def test_unused_skip_profiles_every_parameter() -> None:
    """--unused skip (the default): every parameter in named_parameters order; the unused ones
    take no backward time (their gradient is ready when the backward starts), the body does."""
    module, x = _example()
    result = profile(module, x, loss_fn=hidden_loss, warmup=1, repeats=3)
    names = [layer.name for layer in result.layers]
    assert names == ["body.weight", "body.bias", *UNUSED]
    backward = {layer.name: layer.backward_time_s for layer in result.layers}
    assert all(backward[name] == 0.0 for name in UNUSED)
    assert backward["body.weight"] + backward["body.bias"] > 0


def test_bf16_autocast_on_cpu() -> None:
    """--precision bf16 runs the forward under CPU autocast (the body computes in bfloat16);
    weights and gradients stay FP32 (4 bytes per gradient element in the profile)."""
    module, x = _example()
    result = profile(module, x, loss_fn=hidden_loss, warmup=0, repeats=1,
                     execution=Execution(precision="bf16"))
    assert module.seen == torch.bfloat16
    assert result.dtype_bytes == 4
    profile(module, x, loss_fn=hidden_loss, warmup=0, repeats=1)
    assert module.seen == torch.float32


@pytest.mark.parametrize(("fields", "message"), [
    ({"precision": "fp16"}, "fp16 on the CPU is refused"),
    ({"precision": "tf32"}, "tf32 on the CPU is refused"),
    ({"precision": "int8"}, "precision: 'int8'; accepted: fp32, tf32, bf16, fp16"),
    ({"device": "tpu"}, "device: 'tpu'; accepted: cpu, cuda"),
    ({"unused": "ignore"}, "unused: 'ignore'; accepted: skip, error"),
])
def test_bad_execution_is_refused(fields: dict, message: str) -> None:
    """Unknown names and CPU precisions without a real CPU training path: one line each."""
    with pytest.raises(ConfigError, match=message):
        Execution(**fields)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")
def test_cuda_unavailable_is_one_line() -> None:
    """--device cuda without a GPU: ConfigError in one line saying what torch sees."""
    with pytest.raises(ConfigError, match="device: cuda is not available") as error:
        Execution(device="cuda").check_device()
    assert "\n" not in str(error.value)


def test_channels_last_moves_module_and_images() -> None:
    """Module weights and 4-D float inputs become channels-last; token ids stay as they are."""
    conv = nn.Conv2d(3, 8, 3)
    images, ids = torch.randn(2, 3, 8, 8), torch.zeros(2, 5, dtype=torch.long)
    module, images, ids = Execution(channels_last=True).prepare(conv, images, ids)
    assert module.weight.is_contiguous(memory_format=torch.channels_last)
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert not images.is_contiguous() and ids.is_contiguous()


def _pooler_pipeline() -> PipelineModel:
    """Two blocks; the second holds a pooler-like linear whose output the loss ignores (each
    block ends with an elementwise op: torch's ``stage_backward_input`` cannot split the
    backward of a block whose output is a view, such as a linear layer's on 3-D input)."""
    torch.manual_seed(0)

    class Tail(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.out = nn.Linear(8, 8)
            self.pooler = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.pooler(x[:, 0])
            return torch.relu(self.out(x))

    blocks = nn.Sequential(OrderedDict([("body", nn.Sequential(nn.Linear(8, 8), nn.ReLU())),
                                        ("tail", Tail())]))
    return PipelineModel("pooled", blocks, lambda n, seed: (torch.randn(n, 3, 8),
                                                            torch.randn(n, 3, 8)),
                         lambda out, target: (out - target).pow(2).mean())


def test_pipeline_profile_unused() -> None:
    """pipeline profile: --unused error names block and parameter; skip profiles both blocks
    and the chain document builds."""
    with pytest.raises(ConfigError, match=r"parameter tail\.pooler\.weight gets no gradient"):
        profile_blocks(_pooler_pipeline(), 2, repeats=1, warmup=0,
                       execution=Execution(unused="error"))
    profiles = profile_blocks(_pooler_pipeline(), 2, repeats=1, warmup=0)
    assert [p.name for p in profiles] == ["body", "tail"]
    assert len(chain_document("pooled", profiles)["blocks"]) == 2


def test_pipeline_profile_bf16_stashes_less() -> None:
    """Under bf16 autocast the linear layers save 16-bit tensors: the stash shrinks."""
    model = _pooler_pipeline()
    fp32 = profile_blocks(model, 2, repeats=1, warmup=0)
    bf16 = profile_blocks(model, 2, repeats=1, warmup=0, execution=Execution(precision="bf16"))
    assert bf16[0].stash_bytes < fp32[0].stash_bytes


def test_skipped_profile_feeds_the_data_parallel_planner(run_cli, tmp_path: Path) -> None:
    """A profile with unused parameters loads into ``dlsched dataparallel --profile`` as any
    other: one row per policy, every time finite."""
    module, x = _example()
    path = tmp_path / "pooled.csv"
    write_profile(profile(module, x, loss_fn=hidden_loss, warmup=0, repeats=2), path)
    code, out, err = run_cli("dataparallel", "--profile", str(path), "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"] if out.lstrip().startswith("{") else json.loads(out)
    assert rows and all(row["time_s"] > 0 for row in rows)


@pytest.mark.parametrize(("args", "message"), [
    (("profile", "--precision", "fp16"), "fp16 on the CPU is refused"),
    (("profile", "--unused", "maybe"), "unused: 'maybe'"),
    (("pipeline", "profile", "--precision", "tf32"), "tf32 on the CPU is refused"),
])
def test_cli_refuses_bad_execution(run_cli, tmp_path: Path, args: tuple, message: str) -> None:
    """Bad --precision/--unused values exit 2 with one line, before any profiling."""
    out = ("--out", str(tmp_path / "p.csv")) if args[0] == "profile" else (
        "--chain", str(tmp_path / "c.yaml"))
    code, _, err = run_cli(*args, *out)
    assert code == 2 and message in err
