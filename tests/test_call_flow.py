"""Followed call by call, a command stays inside its domain once the CLI has handed over: no
function of ``dlsched.cli`` is called while a domain's function is running (no callback, no
progress hook, no formatter of the CLI's is handed down). Each command runs in-process under
``sys.setprofile``; scenarios a reproduction sends to worker processes run module-level domain
functions there, by reference."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest

from dlsched.experiments import usbyte


@contextmanager
def returns_to_cli() -> Iterator[list[tuple[str, str, str]]]:
    """Records (domain module on the stack, cli module called, function) for every call into
    ``dlsched.cli`` made while a ``dlsched`` frame outside ``cli`` is running."""
    found: list[tuple[str, str, str]] = []
    stack: list[str | None] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            module = frame.f_globals.get("__name__", "")
            inside = [m for m in stack if m is not None and not m.startswith("dlsched.cli")]
            if module.startswith("dlsched.cli") and inside:
                found.append((inside[-1], module, frame.f_code.co_name))
            stack.append(module if module.startswith("dlsched") else None)
        elif event == "return" and stack:
            stack.pop()

    sys.setprofile(profile)
    try:
        yield found
    finally:
        sys.setprofile(None)


def test_the_tracer_sees_a_planted_callback() -> None:
    """A cli function handed to a domain as its progress hook is reported when the domain
    calls it; the same function called from outside any domain is not."""
    from dlsched.cli import options
    from dlsched.pipeline.chains.random_cases import random_problem
    from dlsched.pipeline.compare import compare

    def hook(names: list[str], total: int) -> list[str]:
        return options.parse_names(",".join(names), names, "planner")

    with returns_to_cli() as found:
        hook(["1f1b"], 1)
    assert found == []
    with returns_to_cli() as found:
        compare(random_problem(0), ["1f1b"], hook)
    assert found and found[0][1:] == ("dlsched.cli.options", "parse_names")
    assert found[0][0].startswith("dlsched.pipeline")


@pytest.mark.parametrize("args", [
    ("pipeline", "plan", "--model", "gpt2-xl", "--devices", "1x8-NVLink", "--microbatches", "4",
     "--planner", "1f1b,dlsched", "--json"),
    ("plan", "--model", "gpt-1.7b", "--gpus", "16", "--global-batch", "64", "--json"),
    ("collective", "--size", "64 MiB", "--chunks", "4", "--json"),
    ("dataparallel", "--model", "resnet50", "--policy", "wfbp,usbyte", "--json"),
], ids=lambda args: " ".join(args[:2]))
def test_a_command_does_not_return_to_the_cli(run_cli: Any, args: tuple[str, ...]) -> None:
    with returns_to_cli() as found:
        code, _, err = run_cli(*args)
    assert code == 0, err
    assert found == []


def test_reproduce_usbyte_does_not_return_to_the_cli(run_cli: Any,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    every = usbyte.scenarios
    monkeypatch.setattr(usbyte, "scenarios", lambda options=None: every(options)[:2])
    with returns_to_cli() as found:
        code, _, err = run_cli("reproduce", "usbyte", "--models", "vgg16", "--jobs", "1",
                               "--json")
    assert code == 0, err
    assert found == []
