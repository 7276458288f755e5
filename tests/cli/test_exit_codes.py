"""Exit codes: 2 only for bad input, 1 for a failed run or a bug (one line each; --debug shows
the traceback)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dlsched.errors import ConfigError, RunFailure

SMALL = ("collective", "--topology", "2D-SW_SW", "--size", "1 MB", "--chunks", "4",
         "--policy", "baseline")


def _raising(error: Exception) -> Any:
    def run(*_: Any, **__: Any) -> None:
        raise error
    return run


def test_a_bug_exits_1_with_one_line_not_2(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ValueError (or any exception) from dlsched's own code is a bug: exit 1, one line that
    says so and names the exception; it is not reported as bad input (exit 2)."""
    from dlsched.interop import astra_collective as collective

    for error in (ValueError("math domain error"), ZeroDivisionError("division by zero")):
        monkeypatch.setattr(collective, "run_collective", _raising(error))
        code, _, err = run_cli(*SMALL)
        assert code == 1, err
        assert len(err.strip().splitlines()) == 1
        assert "bug in dlsched" in err and type(error).__name__ in err and "--debug" in err
        assert "Traceback" not in err


def test_debug_shows_the_traceback_of_a_bug(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """With --debug the exception propagates (its traceback is printed by Python)."""
    from dlsched.interop import astra_collective as collective

    monkeypatch.setattr(collective, "run_collective", _raising(ZeroDivisionError("boom")))
    with pytest.raises(ZeroDivisionError, match="boom"):
        run_cli("--debug", *SMALL)


def test_input_errors_exit_2(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """ConfigError, a unit error and the parser's own errors exit 2 with one line."""
    from dlsched.interop import astra_collective as collective

    for args in (("collective", "--size", "12 parsecs"), ("collective", "--chunks", "x"),
                 ("collective", "--no-such-option")):
        code, _, err = run_cli(*args)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
    monkeypatch.setattr(collective, "run_collective", _raising(ConfigError("size: too big")))
    code, _, err = run_cli(*SMALL)
    assert code == 2 and err.strip() == "error: size: too big"


def test_a_failed_run_exits_1_with_its_summary(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """A RunFailure (a rank died) prints its one-line summary, exit 1; --debug adds the logs."""
    from dlsched.interop import astra_collective as collective

    failure = RunFailure("rank 1 failed (killed by signal 9 (SIGKILL))", "--- rank 0 ---\nlog")
    monkeypatch.setattr(collective, "run_collective", _raising(failure))
    code, _, err = run_cli(*SMALL)
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "rank 1 failed (killed by signal 9 (SIGKILL))" in err and "Traceback" not in err
    code, _, err = run_cli("--debug", *SMALL)
    assert code == 1 and "--- rank 0 ---" in err


def test_dimension_input_errors_are_config_errors() -> None:
    """Validation in the Python API raises ConfigError (exit 2 in the CLI), not ValueError."""
    from dlsched.hardware import Dimension, Topology

    for build in (lambda: Dimension("Mesh", 4, 1e9), lambda: Topology("t", ()),
                  lambda: Dimension("Switch", 6, 1e9, algorithm="halving-doubling")):
        with pytest.raises(ConfigError):
            build()


TEMPLATE = Path(__file__).parents[2] / "docs" / "examples" / "my-runs.yaml"
HOSTILE = [
    # a TorchTitan config whose table is a value, whose degree is 0, whose flag is a string:
    # each named by the option, the file and the TOML key (were internal errors: an
    # AttributeError, a pydantic ValidationError, silently true)
    (("plan", "--from-torchtitan", "{t}"), {"t.toml": "parallelism = 3\n"},
     "--from-torchtitan: {t}: parallelism: 3 is a value, not a table; accepted: a "
     "[parallelism] table"),
    (("plan", "--from-torchtitan", "{t}"),
     {"t.toml": "[parallelism]\ntensor_parallel_degree = 0\n"},
     "--from-torchtitan: {t}: parallelism.tensor_parallel_degree: 0 is out of range; "
     "accepted: an integer >= 1"),
    (("plan", "--from-torchtitan", "{t}"), {"t.toml": '[compile]\nenable = "yes"\n'},
     "--from-torchtitan: {t}: compile.enable: 'yes' is not a boolean; accepted: true, false"),
    (("plan", "--from-torchtitan", "{t}"), {"t.toml": "[model]\nconverters = 5\n"},
     "--from-torchtitan: {t}: model.converters: 5 is not a list of names; accepted:"),
    # a model / system file with a field it does not have: named with the fields it has (was
    # "invalid m.yaml: bogus: Extra inputs are not permitted", no option, nothing accepted)
    (("plan", "--model", "{m}", "--gpus", "8"),
     {"m.yaml": "name: m\nlayers: 2\nhidden: 64\nheads: 4\nseq: 16\nvocab: 100\nbogus: 1\n"},
     "--model: invalid {m}: bogus: not a field of this file; accepted: ffn_hidden, kv_heads,"),
    (("plan", "--model", "{m}", "--gpus", "8"),
     {"m.yaml": "name: m\nlayers: two\nhidden: 64\nheads: 4\nseq: 16\nvocab: 100\n"},
     "--model: invalid {m}: layers: Input should be a valid integer"),
    (("plan", "--cluster", "{s}"), {"s.yaml": "gpu: a100\ngpus: 8\nnode: dgx-a100\nx: 1\n"},
     "--cluster: invalid {s}: x: not a field of this file; accepted: name, gpu, node, gpus,"),
    # the system and job.refusals name the field (gpus, gpu); plan names its option
    (("plan", "--gpus", "1"), {}, "--gpus: 1 GPU leaves no parallel layout and no network to "
     "price; accepted: 2 to 8, or a multiple of 8 up to 32,768"),
    (("plan", "--cluster", "2D-SW_SW", "--gpus", "7"), {},
     "--gpus: 7 differs from the 1024 NPUs of '2D-SW_SW'"),
    (("plan", "--cluster", "{s}"), {"s.yaml": "node: dgx-a100\ngpus: 12\ngpu: z100\n"},
     "--gpu: unknown GPU 'z100'; accepted: h100"),
    (("plan", "--cluster", "{s}"), {"s.yaml": "node: dgx-a100\ngpus: 12\n"},
     "--gpus: 12 must be a multiple of 8 (GPUs per dgx-a100 node) or at most 8"),
    (("plan", "--gpus", "8", "--tp", "8", "--pp", "2"), {},
     "--tp/--pp: TP x PP = 8 x 2 = 16 does not divide the 8 GPUs of --gpus"),
    (("plan", "--model", "llama3-8b", "--gpus", "8", "--expert-tp", "2"), {},
     "--expert-tp: 2 on llama3-8b, a dense model"),
    # the evaluator names its fields (expert_tp, cp, chunks, pp, fp8_recipe, precision,
    # moe_a2a_overlap, execution); plan names its option, and an execution file's own key
    (("plan", "--model", "mixtral-8x7b", "--gpus", "8", "--expert-tp", "3"), {},
     "--expert-tp: 3 does not divide mixtral-8x7b's experts' FFN width 14336"),
    (("plan", "--gpus", "8", "--model", "llama3-8b", "--tp", "1", "--pp", "1", "--dp", "4",
      "--cp", "2", "--seq", "8191", "--microbatch-size", "1", "--global-batch", "64"), {},
     "--cp: 2 needs the sequence (8191 tokens, --seq) to be a multiple of 2 x CP = 4"),
    (("plan", "--gpus", "8", "--model", "llama3-8b", "--tp", "1", "--pp", "8", "--dp", "1",
      "--microbatch-size", "1", "--global-batch", "64", "--schedule", "zb-v", "--chunks", "1"),
     {}, "--chunks: the zb-v schedule runs 2 chunk(s) per rank (got 1); accepted: 2"),
    (("plan", "--gpus", "8", "--model", "llama3-8b", "--tp", "8", "--pp", "1", "--dp", "1",
      "--microbatch-size", "1", "--global-batch", "64", "--schedule", "zb-v", "--chunks", "2"),
     {}, "--pp: the zb-v schedule needs 2 or more pipeline ranks (got 1)"),
    (("plan", "--gpus", "8", "--model", "llama3-8b", "--precision", "fp8", "--fp8-recipe",
      "mxfp8", "--gpu", "h100"), {},
     "--fp8-recipe: mxfp8 needs Blackwell's block-scaled tensor cores "
     "(b200, gb200, b300, gb300), not h100"),
    (("plan", "--gpus", "8", "--model", "llama3-8b", "--precision", "fp8", "--fp8-recipe",
      "delayed"), {}, "--precision: fp8 needs FP8 tensor cores (Hopper or later); a100 has"),
    # an unknown GPU before the node preset's GPU count (was "--gpus: needed with ...")
    (("plan", "--gpu", "nonsense"), {},
     "--gpu: unknown GPU 'nonsense'; accepted: h100, h200, a100"),
    (("plan", "--gpus", "8", "--model", "mixtral-8x7b", "--ep", "1", "--moe-a2a-overlap"), {},
     "--moe-a2a-overlap: needs expert parallelism (EP > 1)"),
    (("plan", "--gpus", "8", "--execution", "{e}"), {"e.yaml": "tp: 0\n"},
     "--execution: {e}: tp: must be >= 1 (got 0)"),
    # a file holding a list where a mapping is read: named as such with the fields, the
    # document not echoed whole (was "Input should be a valid dictionary or instance of
    # TopologySpec (got [...the whole file...])")
    (("collective", "--topology", "{t}"), {"t.yaml": "- " + "x" * 500 + "\n"},
     "--topology: invalid {t}: the document is a list, not a mapping; accepted: a mapping of "
     "name, dims"),
    # pipeline plan: a chain file's or zoo name's error named by --model (was "invalid
    # c.yaml: ..." and "model: unknown model")
    (("pipeline", "plan", "--model", "{c}"), {"c.yaml": "blocks: 3\n"},
     "--model: invalid {c}: blocks: Input should be a valid list (got 3)"),
    (("pipeline", "plan", "--model", "gpt9"), {},
     "--model: unknown model 'gpt9'; accepted: vgg16"),
    (("pipeline", "plan", "--model", "gpt2", "--gpu", "z100"), {},
     "--gpu: unknown GPU 'z100'; accepted: h100"),
    # a model whose state exceeds every GPU's memory together: refused at once (was "no plan
    # fits the GPUs' memory" after the search: 134 s at 1,024 microbatches, minutes more at
    # 4,096): 174.6e9 parameters x 18 B (16-bit weights, FP32 gradients, FP32 master
    # weights, Adam's 8 B) = 2,927 GiB against 16 GPUs x 66.9 GiB usable each
    (("pipeline", "plan", "--model", "gpt3-175b", "--microbatches", "4096"), {},
     "--model: gpt3-175b's weights, gradients and optimizer state (2,927.0 GiB) exceed the "
     "usable memory of all 16 GPUs together"),
    # calibrate (the network): each range named by its option before any rank starts (was
    # one 'sizes:' line for four options, and 'workers:', 'load:', 'comm_nice:',
    # 'timeout_s:' for the others)
    (("calibrate", "--min-size", "64MiB", "--max-size", "4KiB"), {},
     "--min-size: 67,108,864 B is out of range; accepted: 4 B to 4 GiB, below --max-size "
     "(4,096 B)"),
    (("calibrate", "--points", "1"), {}, "--points: 1 is out of range; accepted: 2 to 64"),
    (("calibrate", "--workers", "0"), {}, "--workers: worker count 0 is out of range"),
    (("calibrate", "--load", "busy"), {}, "--load: 'busy'; accepted: none, compute, both"),
    (("calibrate", "--timeout", "-1"), {}, "--timeout: must be in (0, 1e6) seconds"),
    # collective / train / dataparallel: an input file's own error named by its option
    # (were 'astra-network 'x' does not exist', 'x.json:1: <document>: ...', 'profile ...')
    (("collective", "--astra-network", "{t}/none.yaml"), {"t.yaml": ""},
     "--astra-network: astra-network '{t}/none.yaml' does not exist"),
    (("collective", "--astra-system", "{s}"), {"s.json": "[1]"},
     "--astra-system: {s}:1: <document>: "),
    (("train", "--astra-workload", "{w}/none.txt"), {"w.txt": ""},
     "--astra-workload: astra-workload '{w}/none.txt' does not exist"),
    (("dataparallel", "--profile", "{p}"),
     {"p.csv": "name,params,forward_time_s,backward_time_s\nl1,abc,1,2\n"},
     "--profile: invalid profile {p}: layers[0].params: Input should be a valid integer"),
    # sweep GRID / pipeline export PLAN: the file's own error named by the argument
    (("sweep", "{g}", "--dry-run"), {"g.yaml": "domain: collective\naxes: {size: 5}\n"},
     "GRID: invalid {g}: axes.size: Input should be a valid list (got 5)"),
    (("pipeline", "export", "{p}", "--torch-csv", "{p}.csv"), {"p.json": "[1, 2"},
     "PLAN: {p}: not valid JSON"),
    # an unknown subcommand: the ones there are (was "No such command 'x'." alone)
    (("reproduce", "nonsense"), {},
     "No such command 'nonsense'; accepted: themis, megatron, usbyte, pipeline, "
     "themis-training, vtrain, layouts, attention (see "),
    # validate / calibrate runs: the option naming the runs file on every refusal, --gpu
    # named as such (was "device: unknown GPU")
    (("validate", "--ledger", "{r}"), {"r.yaml": "- id: a\n"},
     "--ledger: {r}: a: citation: Field required (5 problem(s) in this run)"),
    (("validate", "--ledger", "{r}/nothing.yaml"), {"r.yaml": ""},
     "--ledger: file '{r}/nothing.yaml' does not exist"),
    (("validate", "--ledger", str(TEMPLATE), "--gpu", "z100"), {},
     "--gpu: unknown GPU 'z100'; accepted: h100"),
    (("calibrate", "runs", "{r}", "--out", "{r}.yaml"), {"r.json": "{\"runs\": 3}"},
     "RUNS: {r}: expected a non-empty list of runs"),
]
"""Hostile input: (arguments, files written under tmp_path, the error's start), ``{name}``
standing for the path of file ``name.*`` in both."""


@pytest.mark.parametrize(("args", "files", "message"), HOSTILE)
def test_hostile_input_is_one_line_naming_the_option(run_cli, tmp_path, args, files,
                                                     message) -> None:
    """Bad input exits 2 with one line that starts with the option at fault (and says what
    is accepted), never an internal error, and leaves its input files as they were."""
    paths = {}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        paths[name.partition(".")[0]] = str(tmp_path / name)
    code, _, err = run_cli(*(arg.format(**paths) for arg in args))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: " + message.format(**paths)), err
    assert all((tmp_path / name).read_text() == text for name, text in files.items())
