"""The contract every paper reproduction keeps: one module of ``experiments`` (``themis``,
``themis_training``, ``usbyte``, ``pipeline``, ``megatron``, ``vtrain``) giving

* ``NAME``: its ``dlsched reproduce`` command, also the domain of its results file;
* ``scenarios(options)``: what runs, as frozen dataclasses (a scenario's repr identifies its
  stored result);
* ``run_scenario(scenario)``: how one runs, as its table rows (SI units: seconds, bytes); a
  module-level function, so it reaches worker processes by reference;
* ``document(rows, options)``: its summary, as what ``--json`` prints (the rows beside it);
* ``sections(document, options)``: its tables, headlines first, and paragraphs, as printed
  without ``--json``.

``options`` is the module's own ``Options`` (None where it has none). One runner,
``sweep.reproduce``, runs every paper through the sweep runner and returns ``Reproduced``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dlsched.report.sections import Section

Rows = list[dict[str, Any]]


class Paper(Protocol):
    """A reproduction module (see the module docstring)."""

    NAME: str

    def scenarios(self, options: Any) -> Sequence[Any]: ...

    def run_scenario(self, scenario: Any) -> Rows: ...

    def document(self, rows: Rows, options: Any) -> dict[str, Any]: ...

    def sections(self, document: dict[str, Any], options: Any) -> list[Section]: ...


@dataclass(frozen=True)
class Reproduced:
    """A paper run: its ``document`` (``rows`` and their summary, what ``--json`` prints) and
    the errors of the scenarios that failed (left out of the rows)."""

    paper: Paper
    options: Any
    document: dict[str, Any]
    errors: tuple[str, ...] = ()

    @property
    def rows(self) -> Rows:
        """The table rows of every scenario that ran, in scenario order."""
        return self.document["rows"]

    def sections(self) -> list[Section]:
        """What the command prints without ``--json``."""
        return self.paper.sections(self.document, self.options)
