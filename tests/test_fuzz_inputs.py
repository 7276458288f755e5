"""Property tests: every CLI numeric option and every config model, fed NaN, ±inf, zero,
negative, huge and malformed values, ends with exit 0 and finite numbers or exit 2 and an error
line — never a traceback, a hang or a non-finite number in the output."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dlsched.errors import ConfigError
from dlsched.hardware.device_config import devices_from_data
from dlsched.hardware.topology_config import topology_from_data
from dlsched.models.profile_io import load_profile
from dlsched.pipeline.chains.model_source import load_chain

FUZZ = settings(max_examples=12, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

NASTY = ["nan", "NaN", "inf", "-inf", "+inf", "0", "-0", "-1", "1e-300", "1e308", "1e400",
         "99999999999999999999", "abc", "", " ", "1.5", "0x10", "2", "7", "--", "1,2"]
numbers = st.one_of(st.sampled_from(NASTY), st.integers(-10**12, 10**12).map(str),
                    st.floats(allow_nan=True, allow_infinity=True).map(repr))
nasty_values = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf, 0, -1, 10**30, 1e-300,
                                          "nan GB/s", "1e400 B/s", "fast", "-5 ns", None, [],
                                          {}, True]),
                         st.floats(allow_nan=True, allow_infinity=True), st.integers())


def _finite(payload: Any) -> None:
    """Every number in the JSON output is finite."""
    if isinstance(payload, float):
        assert math.isfinite(payload), payload
    elif isinstance(payload, dict):
        for value in payload.values():
            _finite(value)
    elif isinstance(payload, list):
        for value in payload:
            _finite(value)


def _clean(code: int, out: str, err: str) -> None:
    """Exit 0 with finite JSON, or exit 2 with an error line; never a traceback."""
    assert "Traceback" not in out + err
    assert code in (0, 2), (code, err)
    if code == 2:  # one line "error: ...", also for click's usage errors
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
        return

    def refuse(constant: str) -> None:
        raise AssertionError(f"non-finite {constant} in the JSON output")

    _finite(json.loads(out, parse_constant=refuse))


COLLECTIVE = ("collective", "--topology", "2D-SW_SW", "--policy", "baseline,themis",
              "--size", "1 MB", "--json")


@pytest.mark.parametrize("option", ["--size", "--chunks", "--concurrency"])
@FUZZ
@given(value=numbers)
def test_collective_numeric_options(run_cli, option: str, value: str) -> None:
    """``dlsched collective`` with any value of one numeric option."""
    _clean(*run_cli(*COLLECTIVE, option, value))


DATAPARALLEL = ("dataparallel", "--model", "vgg16", "--policy", "wfbp,mgwfbp", "--json")


@pytest.mark.parametrize("template", ["--workers={}", "--batch-size={}", "--efficiency={}",
                                      "--in-flight={}", "--backward-ratio={}",
                                      "--network=1ms,{}", "--network={},1e-10",
                                      "--network=ring:{},5us", "--network=ring:10GB/s,{}"])
@FUZZ
@given(value=numbers)
def test_dataparallel_numeric_options(run_cli, template: str, value: str) -> None:
    """``dlsched dataparallel`` with any value in one numeric option (or network number)."""
    option = template.format(value)
    extra = ("--network", "ring:10GB/s,5us") if option.startswith("--workers") else ()
    _clean(*run_cli(*DATAPARALLEL, *extra, option))


@pytest.mark.parametrize("option", ["--microbatches", "--microbatch-size"])
@FUZZ
@given(value=numbers)
def test_pipeline_numeric_options(run_cli, chain_file: Path, option: str, value: str) -> None:
    """``dlsched pipeline plan`` with any value of one numeric option."""
    _clean(*run_cli("pipeline", "plan", "--model", str(chain_file), "--devices", "1x8-NVLink",
                    "--planner", "gpipe", "--microbatches", "8", "--json", option, value))


@pytest.mark.parametrize("field", ["size", "bandwidth", "latency"])
@FUZZ
@given(value=nasty_values)
def test_topology_model(field: str, value: Any) -> None:
    """A topology dimension with any value in one field builds finite or raises ConfigError."""
    dim = {"kind": "Ring", "size": 4, "bandwidth": "10 GB/s", "latency": "1 us", field: value}
    try:
        net = topology_from_data({"dims": [dim]})
    except ConfigError as error:
        assert field in str(error)
        return
    assert all(math.isfinite(d.bandwidth) and math.isfinite(d.latency) for d in net.dims)


@pytest.mark.parametrize("path", [("gpu", "flops"), ("gpu", "memory"), ("link", "bandwidth"),
                                  ("link", "latency"), ("count",)])
@FUZZ
@given(value=nasty_values)
def test_device_graph_model(path: tuple[str, ...], value: Any) -> None:
    """A server device graph with any value in one field: finite graph or ConfigError."""
    server: dict[str, Any] = {"count": 2, "gpu": {"flops": "100 TFLOP/s", "memory": "16 GiB"},
                              "link": {"bandwidth": "100 GB/s", "latency": "1 us"}}
    target = server
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    try:
        graph = devices_from_data({"servers": [server]})
    except ConfigError:
        return
    assert all(math.isfinite(v) for v in graph.bandwidth.flat)
    assert all(math.isfinite(v) for v in graph.latency.flat)


@pytest.mark.parametrize("field", ["forward_flops", "backward_flops", "activation", "params",
                                   "stash"])
@FUZZ
@given(value=nasty_values)
def test_chain_model(tmp_path_factory: pytest.TempPathFactory, field: str, value: Any) -> None:
    """A chain file with any value in one block field: a chain or ConfigError naming it."""
    block = {"name": "a", "forward_flops": 1e9, field: value}
    path = tmp_path_factory.mktemp("chain") / "c.json"
    path.write_text(json.dumps({"blocks": [block, {"name": "b", "forward_flops": 1e9}]}))
    try:
        chain = load_chain(path, 1)
    except ConfigError:
        return
    assert all(math.isfinite(v) for v in chain.forward_flops)


@pytest.mark.parametrize("field", ["params", "forward_time_s", "backward_time_s",
                                   "activation_bytes", "forward_flops"])
@FUZZ
@given(value=nasty_values)
def test_profile_model(tmp_path_factory: pytest.TempPathFactory, field: str, value: Any) -> None:
    """A profile with any value in one layer field: a model or ConfigError."""
    layer = {"name": "a", "params": 10, "forward_time_s": 1e-3, "backward_time_s": 2e-3,
             field: value}
    path = tmp_path_factory.mktemp("profile") / "p.json"
    path.write_text(json.dumps({"layers": [layer]}))
    try:
        model = load_profile(path)
    except ConfigError:
        return
    assert all(math.isfinite(layer.forward_time or 0.0) for layer in model.layers)


@pytest.mark.parametrize(("module", "function", "args"), [
    ("dlsched.interop.astra_collective", "run_collective",
     ("collective", "--topology", "2D-SW_SW")),
    ("dlsched.dataparallel.compare", "run_dataparallel", ("dataparallel", "--model", "vgg16")),
    ("dlsched.pipeline.compare", "run_planner", ("pipeline", "plan", "--devices", "1x8-NVLink")),
    ("dlsched.training.compare", "run_policies", ("train", "--topology", "2D-SW_SW")),
])
@pytest.mark.parametrize("option", ["--csv", "--trace", "--plot"])
def test_unwritable_output_exits_before_any_work(run_cli, monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path, module: str, function: str,
                                                 args: tuple[str, ...], option: str) -> None:
    """An unwritable, directory or /proc output path: exit 2, and the simulator never runs."""
    import importlib

    def never(*_: Any, **__: Any) -> None:
        raise AssertionError("the computation ran before the output path was checked")

    monkeypatch.setattr(importlib.import_module(module), function, never)
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    suffix = {"--csv": ".csv", "--trace": ".json", "--plot": ".png"}[option]
    for bad in (f"/proc/x{suffix}", str(tmp_path), str(afile / f"out{suffix}")):
        code, _, err = run_cli(*args, option, bad)
        assert code == 2, (bad, err)
        assert err.startswith("error:") and option in err


def test_reproductions_check_csv_before_work(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every reproduction refuses an unwritable --csv before running anything."""
    from dlsched.cli.scenario_runs import Reproduction

    def never(*_: Any, **__: Any) -> None:
        raise AssertionError("ran before checking --csv")

    monkeypatch.setattr(Reproduction, "run", never)
    for command in ("themis", "usbyte", "pipeline", "themis-training", "megatron"):
        code, _, err = run_cli("reproduce", command, "--csv", "/proc/x.csv")
        assert code == 2 and "--csv" in err, (command, err)


def test_workers_means_ranks_everywhere(run_cli) -> None:
    """--workers is honoured by ring networks, must match a preset or topology, and is refused
    for ALPHA,BETA."""
    times = []
    for workers in ("2", "64"):
        code, out, _ = run_cli(*DATAPARALLEL, "--network", "ring:10GB/s,5us", "--workers",
                               workers)
        assert code == 0
        times.append(json.loads(out)["rows"][0]["time_s"])
    assert times[1] > times[0]
    for network, needle in (("usbyte-8", "measured with 8"), ("topology:2D-SW_SW", "has 1024"),
                            ("1ms,1e-10", "not used")):
        code, _, err = run_cli(*DATAPARALLEL, "--network", network, "--workers", "16")
        assert code == 2 and needle in err, (network, err)
    code, out, _ = run_cli(*DATAPARALLEL, "--network", "usbyte-4")
    assert code == 0 and json.loads(out)["rows"][0]["workers"] == 4


def test_ours_is_an_alias_of_dlsched(run_cli) -> None:
    """The shared policy parser reads ``ours`` as ``dlsched``."""
    code, out, _ = run_cli("collective", "--topology", "2D-SW_SW", "--size", "1 MB",
                           "--policy", "ours", "--json")
    assert code == 0
    row = json.loads(out)["rows"][0]
    assert row["policy"] == "dlsched" and row["speedup_vs_baseline"] >= 1 - 1e-9


def test_version(run_cli) -> None:
    """``dlsched --version`` prints the package version."""
    from dlsched import __version__

    code, out, _ = run_cli("--version")
    assert code == 0 and __version__ in out


@pytest.mark.parametrize("backward", [0, None])
def test_chain_with_zero_costs_plans_or_refuses(run_cli, tmp_path: Path,
                                                backward: float | None) -> None:
    """A chain whose backward costs are all zero (or whose forward costs are all zero) gives a
    finite plan for every planner and recomputation mode, or a clean refusal; never a
    ZeroDivisionError."""
    blocks = [{"name": "a", "forward_flops": 1e9}, {"name": "b", "forward_flops": 0}]
    for block in blocks:
        if backward is not None:
            block["backward_flops"] = backward
    path = tmp_path / "zero.json"
    path.write_text(json.dumps({"blocks": blocks}))
    code, out, err = run_cli("pipeline", "plan", "--model", str(path), "--devices", "1x8-NVLink",
                             "--planner", "all", "--microbatches", "4", "--json")
    assert code == 0, err
    _clean(code, out, err)
    path.write_text(json.dumps({"blocks": [{"name": "a", "forward_flops": 0,
                                            "backward_flops": 0}]}))
    code, out, err = run_cli("pipeline", "plan", "--model", str(path), "--devices", "1x8-NVLink",
                             "--json")
    assert code == 2 and "forward_flops" in err


FEW = settings(max_examples=6, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(value=numbers)
def test_pipeline_state_bytes_option(run_cli, chain_file: Path, value: str) -> None:
    """``dlsched pipeline plan --state-bytes`` with any value."""
    _clean(*run_cli("pipeline", "plan", "--model", str(chain_file), "--devices", "1x8-NVLink",
                    "--planner", "gpipe", "--microbatches", "4", "--json", "--state-bytes",
                    value))


@pytest.mark.parametrize("option", ["--iterations", "--chunks", "--concurrency"])
@FEW
@given(value=st.one_of(st.sampled_from(["nan", "inf", "0", "-1", "1e400", "abc", "", "2",
                                        "99999999999", "1.5"]),
                       st.integers(-10**6, 10**6).map(str)))
def test_train_numeric_options(run_cli, option: str, value: str) -> None:
    """``dlsched train`` (simulated iterations) with any value of one numeric option."""
    _clean(*run_cli("train", "--topology", "2D-SW_SW", "--policy", "baseline", "--chunks", "4",
                    "--iterations", "2", "--json", option, value))


@pytest.fixture
def tiny_grid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-scenario collective grid."""
    path = tmp_path_factory.mktemp("grid") / "g.json"
    path.write_text(json.dumps({"domain": "collective", "fixed": {"topology": "2D-SW_SW",
                                                                 "size": "1 MB", "chunks": 4},
                                "axes": {"policy": ["baseline", "themis"]}}))
    return path


@pytest.mark.parametrize("option", ["--jobs", "--batch-size"])
@FUZZ
@given(value=numbers)
def test_sweep_numeric_options(run_cli, tiny_grid: Path, option: str, value: str) -> None:
    """``dlsched sweep GRID --dry-run`` with any --jobs or --batch-size: a count and an
    estimate (exit 0) or a one-line error (exit 2)."""
    code, out, err = run_cli("sweep", str(tiny_grid), "--dry-run", option, value)
    assert "Traceback" not in out + err
    assert code in (0, 2), err
    if code == 2:
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    else:
        assert "2 scenarios in the grid" in " ".join(out.split())


@pytest.mark.parametrize("command", ["themis", "usbyte", "pipeline", "themis-training",
                                     "megatron"])
@FEW
@given(value=numbers)
def test_reproduce_jobs_option(run_cli, monkeypatch: pytest.MonkeyPatch, command: str,
                               value: str) -> None:
    """``dlsched reproduce * --jobs`` with any value: refused with one line before any
    scenario runs, or handed to the runner as a count within the documented limit."""
    from dlsched.cli import scenario_runs

    class Ran(BaseException):
        """The runner was reached (the reproduction itself is not run here; a BaseException,
        so the CLI does not report it as a bug)."""

    def reached(job, store, todo, executor, workers, *rest):
        assert workers is None or 1 <= workers <= 64, workers
        raise Ran

    monkeypatch.setattr(scenario_runs, "execute", reached)
    try:
        code, out, err = run_cli("reproduce", command, "--jobs", value)
    except Ran:
        return
    assert "Traceback" not in out + err
    assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err


GRID_FIELDS = [("collective", name) for name in ("size", "chunks", "concurrency",
                                                 "latency_scale", "topology", "policy")] + [
    ("dataparallel", name) for name in ("workers", "efficiency", "batch_size", "network")] + [
    ("pipeline", name) for name in ("microbatches", "microbatch_size", "devices")] + [
    ("training", name) for name in ("iterations", "chunks", "latency_scale", "workload")]


@pytest.mark.parametrize(("domain", "field"), GRID_FIELDS)
@FUZZ
@given(value=nasty_values)
def test_grid_model(domain: str, field: str, value: Any) -> None:
    """A grid file with any value of one parameter: a grid whose scenarios hold finite
    numbers, or a ConfigError naming the parameter's place in the file."""
    from dlsched.sweep import grid_from_data

    try:
        grid = grid_from_data({"domain": domain, "axes": {field: [value]}})
    except ConfigError as error:
        assert f"axes.{field}" in str(error), error
        return
    for scenario in grid.scenarios():
        assert all(math.isfinite(v) for v in scenario.values()
                   if isinstance(v, float)), scenario


NETWORK_FIELDS = [("alpha_beta", "alpha"), ("alpha_beta", "bandwidth"), ("ring", "latency"),
                  ("ring", "bandwidth"), ("piecewise", 0, "up_to"), ("piecewise", 1, "alpha"),
                  ("piecewise", 2, "bandwidth"), ("workers",), ("samples", 0, "seconds"),
                  ("samples", 0, "bytes")]


@pytest.mark.parametrize("path", NETWORK_FIELDS)
@FEW
@given(value=nasty_values)
def test_network_file_model(run_cli, tmp_path_factory: pytest.TempPathFactory,
                            path: tuple, value: Any) -> None:
    """A fitted network file (``dataparallel --network FILE``) with any value in one field:
    finite rows (exit 0) or a one-line error (exit 2)."""
    import yaml

    document = yaml.safe_load(Path("examples/network-gloo-4ranks.yaml").read_text())
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    file = tmp_path_factory.mktemp("net") / "net.json"
    file.write_text(json.dumps(document))
    _clean(*run_cli(*DATAPARALLEL, "--network", str(file)))


@pytest.mark.parametrize("field", ["endpoint-delay", "active-chunks-per-dimension",
                                   "preferred-dataset-splits"])
@FEW
@given(value=nasty_values)
def test_astra_system_model(run_cli, tmp_path_factory: pytest.TempPathFactory, field: str,
                            value: Any) -> None:
    """An ASTRA-sim system file with any value in one numeric field."""
    document = json.loads(Path("examples/astra/system_themis.json").read_text())
    document[field] = value
    file = tmp_path_factory.mktemp("astra") / "system.json"
    file.write_text(json.dumps(document))
    _clean(*run_cli(*COLLECTIVE, "--astra-system", str(file)))


@pytest.mark.parametrize("field", ["state_factor", "input_grad_fraction", "selective_stash",
                                   "input", "recompute_flops"])
@FUZZ
@given(value=nasty_values)
def test_chain_optional_fields(tmp_path_factory: pytest.TempPathFactory, field: str,
                               value: Any) -> None:
    """A chain file with any value in one optional field: a finite chain or ConfigError."""
    blocks = [{"name": "a", "forward_flops": 1e9}, {"name": "b", "forward_flops": 1e9}]
    document: dict[str, Any] = {"blocks": blocks}
    if field in ("state_factor", "input_grad_fraction"):
        document[field] = value
    else:
        for block in blocks:
            block[field] = value
    path = tmp_path_factory.mktemp("chain") / "c.json"
    path.write_text(json.dumps(document))
    try:
        chain = load_chain(path, 1)
    except ConfigError:
        return
    for mode in ("none", "selective", "full"):
        variant = chain.with_recompute(mode)
        assert np.isfinite(variant.backward_flops).all() and math.isfinite(variant.state_factor)


@pytest.mark.parametrize("field", ["num_microbatches", "microbatch_size", "activation_bytes",
                                   "param_bytes"])
@FEW
@given(value=nasty_values)
def test_plan_file_model(run_cli, tmp_path_factory: pytest.TempPathFactory, field: str,
                         value: Any) -> None:
    """A saved plan (``pipeline export``) with any value in one field: exported or refused
    with one line, never a hang (10**9 microbatches used to hang)."""
    folder = tmp_path_factory.mktemp("plan")
    code, _, err = run_cli("pipeline", "plan", "--model", "gpt2-xl", "--devices", "1x8-NVLink",
                           "--planner", "1f1b", "--microbatches", "4",
                           "--save", str(folder / "p.json"))
    assert code == 0, err
    document = json.loads((folder / "p.json").read_text())
    if field in ("activation_bytes", "param_bytes"):
        document["blocks"][0][field] = value
    else:
        document[field] = value
    (folder / "p.json").write_text(json.dumps(document))
    code, out, err = run_cli("pipeline", "export", str(folder / "p.json"),
                             "--torch-csv", str(folder / "a.csv"))
    assert "Traceback" not in out + err and code in (0, 2), err


@pytest.mark.parametrize("field", ["bandwidth", "latency"])
@FEW
@given(value=nasty_values)
def test_device_matrix_model(field: str, value: Any) -> None:
    """The matrix form of a device graph with any value in one off-diagonal entry."""
    matrix: list[list[Any]] = [[0, "10 GB/s" if field == "bandwidth" else "1 us"],
                               ["10 GB/s" if field == "bandwidth" else "1 us", 0]]
    matrix[0][1] = value
    document: dict[str, Any] = {
        "devices": [{"name": "a", "flops": "10 TFLOP/s", "memory": "16 GiB"},
                    {"name": "b", "flops": "10 TFLOP/s", "memory": "16 GiB"}],
        "bandwidth": [[0, "10 GB/s"], ["10 GB/s", 0]], field: matrix}
    try:
        graph = devices_from_data(document)
    except ConfigError as error:
        assert field in str(error), error
        return
    assert np.isfinite(graph.bandwidth[0, 1]) and np.isfinite(graph.latency[0, 1])


@pytest.mark.parametrize("value", ["0", "-1", "257", "100000"])
def test_profile_threads_refused_before_torch(run_cli, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path, value: str) -> None:
    """``dlsched profile --threads`` outside 1..256 exits 2 before torch is touched (0 used to
    end in a torch RuntimeError traceback, 100000 in a segmentation fault)."""
    import dlsched.runtime

    def never() -> None:
        raise AssertionError("torch was needed before --threads was checked")

    monkeypatch.setattr(dlsched.runtime, "require_torch", never)
    code, _, err = run_cli("profile", "--threads", value, "--out", str(tmp_path / "p.csv"))
    assert code == 2 and err.startswith("error: --threads: thread count"), err
