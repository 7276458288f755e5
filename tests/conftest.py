"""Shared test helpers: run the CLI in-process and capture its exit code and output; a tiny
chain file for quick pipeline runs; a seeded shuffle of the test order; the options of the
recorded reproductions (``--record-reproductions``, ``--recorded-full``).

``DLSCHED_TEST_SEED=random`` (CI's second run) or ``DLSCHED_TEST_SEED=<integer>`` runs the
modules in a shuffled order and the tests of each module in a shuffled order (modules stay
whole, so a module's fixtures are set up once); the seed is printed in the header, and the
same value reproduces the order. Unset: the files' order."""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlsched.cli.app import main

SEED_VARIABLE = "DLSCHED_TEST_SEED"


def _order_seed() -> int | None:
    """The shuffle's seed from ``DLSCHED_TEST_SEED`` (drawn once for ``random``), or None."""
    text = os.environ.get(SEED_VARIABLE, "").strip()
    if not text:
        return None
    if text == "random":
        os.environ[SEED_VARIABLE] = str(random.SystemRandom().randrange(2**32))
        return int(os.environ[SEED_VARIABLE])
    try:
        return int(text)
    except ValueError:
        raise pytest.UsageError(f"{SEED_VARIABLE}: {text!r}; accepted: an integer or "
                                "random") from None


_SEED = pytest.StashKey[int | None]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """The recorded reproductions' options (``tests/experiments/test_reproduce_recorded.py``)."""
    group = parser.getgroup("recorded reproductions")
    group.addoption("--record-reproductions", action="store_true",
                    help="write the recorded outputs of dlsched reproduce again instead of "
                    "comparing with them (a recording changes only with a stated reason)")
    group.addoption("--recorded-full", action="store_true",
                    help="also run the full (minutes-long) recorded reproductions")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SEED] = _order_seed()


def _order_line(config: pytest.Config) -> str:
    seed = config.stash[_SEED]
    if seed is None:
        return f"test order: the files' ({SEED_VARIABLE} unset)"
    return (f"test order: shuffled by module and within each module, {SEED_VARIABLE}={seed} "
            "(set it to reproduce this order)")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Print the order's seed first (also under -q), and again in the summary."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and session.config.stash[_SEED] is not None:
        reporter.write_line(_order_line(session.config))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter,
                            config: pytest.Config) -> None:
    if config.stash[_SEED] is not None:
        terminalreporter.write_line(_order_line(config))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Shuffle the modules and the tests inside each module with the seed (if any)."""
    seed = config.stash[_SEED]
    if seed is None:
        return
    rng = random.Random(seed)
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.partition("::")[0], []).append(item)
    order = list(modules)
    rng.shuffle(order)
    shuffled = []
    for name in order:
        rng.shuffle(modules[name])
        shuffled.extend(modules[name])
    items[:] = shuffled



@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """``run_cli("collective", "--json")`` -> (exit code, stdout, stderr)."""

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["dlsched", *args])
        code = 0
        try:
            main()
        except SystemExit as done:
            code = int(done.code or 0)
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def chain_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A four-block chain for quick pipeline runs (a module may define its own)."""
    path = tmp_path_factory.mktemp("chain") / "tiny.yaml"
    path.write_text("name: tiny\nblocks:\n" + "".join(
        f"  - {{name: b{i}, forward_flops: {i + 1}e11, activation: 4 MB, params: 20 MB}}\n"
        for i in range(4)))
    return path
