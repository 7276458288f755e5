"""What the six ``dlsched reproduce`` commands print, held against a recording.

Each case runs one ``dlsched reproduce <paper>`` command in-process, once with ``--json`` and
once printing its tables (from the first run's ``--db`` with ``--resume``, where the command
takes them, so the scenarios run once), and compares both with the files under ``recorded/``
(see its README): the JSON field by field (floats within ``REL_TOL``, everything else exactly; the
wall-clock fields of ``TIMING_KEYS`` dropped), the tables line by line. The cases that run by
default are cut to a few scenarios each (``subset``: module attributes replaced while the
command runs, as the other reproduction tests do) so they take seconds; the ``full`` cases run
the commands as a user types them (minutes, JSON only) with ``pytest --recorded-full``.

``pytest --record-reproductions tests/experiments/test_reproduce_recorded.py`` writes the
recordings again instead of comparing (add ``--recorded-full`` for the full cases). A
recording may change only with a stated reason: the commit that changes it says which
numbers moved and why (a model fixed, a row added), never "re-recorded".
"""

from __future__ import annotations

import importlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

RECORDED = Path(__file__).parent / "recorded"
REL_TOL = 1e-9
ABS_TOL = 1e-15  # a float recorded as 0 (or 1e-300) may come back as round-off
TIMING_KEYS = frozenset({"planning_s"})
"""Keys whose values are wall-clock or CPU seconds of this machine; dropped before comparing."""
TABLE_WIDTH = 140  # the width the CLI's console uses for piped output
ANSI = re.compile(r"\x1b\[[0-9;]*m")
EXAMPLES = "examples/astra"  # ASTRA-sim 1.0 workloads, from the repository root as pytest runs


@dataclass(frozen=True)
class First:
    """In a case's ``subset``: the first ``n`` items of the module's own value."""

    n: int


@dataclass(frozen=True)
class Case:
    """One recorded command: its arguments after ``dlsched reproduce`` (without ``--json``),
    the module attributes it runs with (``{"module": {"NAME": value}}``), whether it is a
    full (slow) run, whose JSON alone is recorded, and whether it keeps its results in
    ``--db``."""

    args: tuple[str, ...]
    subset: dict[str, dict[str, Any]] = field(default_factory=dict)
    full: bool = False
    db: bool = True


CASES = {
    "themis": Case(("themis", "--jobs", "1"), {"dlsched.experiments.themis": {
        "TOPOLOGIES": ("2D-SW_SW", "4D-Ring_FC_Ring_SW"),
        "SIZES": (100_000_000, 500_000_000),
        "CHUNK_SWEEP": (8, 64),
        "CHUNK_SWEEP_TOPOLOGIES": ("3D-SW_SW_SW_hetero",)}}),
    "megatron": Case(("megatron", "--rows", "gpt-1.7b,gpt-39.1b", "--max-plan-gpus", "32"),
                     db=False),
    "usbyte": Case(("usbyte", "--models", "vgg16", "--jobs", "1")),
    "pipeline": Case(("pipeline", "--jobs", "1"), {"dlsched.experiments.pipeline": {
        "SCENARIOS": First(3)}}),
    "themis-training-paper": Case(("themis-training", "--jobs", "1"), {
        "dlsched.experiments.themis_training": {
            "WORKLOADS": ("resnet152", "gnmt", "dlrm"),
            "TOPOLOGIES": ("2D-SW_SW", "3D-FC_Ring_SW")}}),
    "themis-training-overlap": Case(
        ("themis-training", "--method", "overlap", "--compute", "comm-only", "--jobs", "1"),
        {"dlsched.experiments.themis_training": {"WORKLOADS": ("gnmt", "dlrm"),
                                                 "TOPOLOGIES": ("2D-SW_SW",)}}),
    "themis-training-files": Case(
        ("themis-training", "--workload-files", EXAMPLES, "--jobs", "1"),
        {"dlsched.experiments.themis_training": {"TOPOLOGIES": ("2D-SW_SW",)}}),
    "vtrain": Case(("vtrain", "--models", "h2048-l12", "--jobs", "1")),
    "themis-full": Case(("themis", "--jobs", "2"), full=True),
    "pipeline-fifo-full": Case(("pipeline", "--link-sharing", "fifo", "--jobs", "2"),
                               full=True),
    "themis-training-paper-full": Case(("themis-training", "--jobs", "2"), full=True),
}
"""Every recorded command, by the name of its files under ``recorded/``."""


def _apply_subset(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, attributes in case.subset.items():
        module = importlib.import_module(name)
        for attribute, value in attributes.items():
            if isinstance(value, First):
                value = getattr(module, attribute)[:value.n]
            monkeypatch.setattr(module, attribute, value)


def normalised(value: Any) -> Any:
    """``value`` without the keys of ``TIMING_KEYS``, at any depth."""
    if isinstance(value, dict):
        return {key: normalised(item) for key, item in value.items() if key not in TIMING_KEYS}
    if isinstance(value, list):
        return [normalised(item) for item in value]
    return value


def differences(recorded: Any, fresh: Any, where: str = "") -> list[str]:
    """Where ``fresh`` differs from ``recorded``: floats beyond ``REL_TOL`` (relative) or
    ``ABS_TOL``, any other value, key or length not equal; one line per difference."""
    if isinstance(recorded, dict) and isinstance(fresh, dict):
        if list(recorded) != list(fresh):
            return [f"{where or '.'}: keys {list(recorded)} recorded, {list(fresh)} now"]
        return [line for key in recorded
                for line in differences(recorded[key], fresh[key], f"{where}.{key}")]
    if isinstance(recorded, list) and isinstance(fresh, list):
        if len(recorded) != len(fresh):
            return [f"{where}: {len(recorded)} items recorded, {len(fresh)} now"]
        return [line for index, (a, b) in enumerate(zip(recorded, fresh, strict=True))
                for line in differences(a, b, f"{where}[{index}]")]
    if (isinstance(recorded, float) and isinstance(fresh, float | int)
            and not isinstance(fresh, bool)):
        if math.isclose(recorded, fresh, rel_tol=REL_TOL, abs_tol=ABS_TOL):
            return []
    elif type(recorded) is type(fresh) and recorded == fresh:
        return []
    return [f"{where}: {recorded!r} recorded, {fresh!r} now"]


def _lines(text: str) -> list[str]:
    """The printed tables as lines, without colour codes and trailing blanks."""
    return [ANSI.sub("", line).rstrip() for line in text.strip("\n").splitlines()]


def _selected(config: pytest.Config) -> list[str]:
    full = config.getoption("--recorded-full")
    return [name for name, case in CASES.items() if full or not case.full]


@pytest.fixture
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables at ``TABLE_WIDTH`` columns whatever the terminal."""
    from dlsched.cli.options import console

    monkeypatch.setattr(console, "_width", TABLE_WIDTH)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case_name" in metafunc.fixturenames:
        metafunc.parametrize("case_name", _selected(metafunc.config))


def test_reproduce_prints_what_was_recorded(
        case_name: str, run_cli: Callable[..., tuple[int, str, str]],
        monkeypatch: pytest.MonkeyPatch, wide_console: None, tmp_path: Path,
        request: pytest.FixtureRequest) -> None:
    """``dlsched reproduce ... --json`` gives the recorded rows and summaries, and without
    ``--json`` prints the recorded tables (see the module docstring)."""
    case = CASES[case_name]
    _apply_subset(case, monkeypatch)
    db = ("--db", str(tmp_path / "results.db")) if case.db else ()
    code, out, err = run_cli("reproduce", *case.args, "--json", *db)
    assert code == 0, err
    fresh = normalised(json.loads(out))
    text = None
    if not case.full:
        code, out, err = run_cli("reproduce", *case.args, *db, *("--resume",) * case.db)
        assert code == 0, err
        text = _lines(out)
    json_file, text_file = RECORDED / f"{case_name}.json", RECORDED / f"{case_name}.txt"
    if request.config.getoption("--record-reproductions"):
        json_file.write_text(json.dumps({
            "command": "dlsched reproduce " + " ".join(case.args) + " --json",
            "subset": case.subset, "dropped": sorted(TIMING_KEYS), "output": fresh},
            indent=1, default=repr) + "\n")
        if text is not None:
            text_file.write_text("\n".join(text) + "\n")
        pytest.skip(f"recorded {case_name}")
    found = differences(json.loads(json_file.read_text())["output"], fresh)
    assert not found, f"{len(found)} differences from {json_file.name}:\n" + "\n".join(
        found[:20])
    if text is not None:
        assert text == text_file.read_text().splitlines(), f"tables differ from {text_file}"
