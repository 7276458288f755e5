"""What a report prints, as data: tables of rows and paragraphs of text, in order. A paper
reproduction gives its output as sections (``experiments``); the CLI renders them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markup import escape

from dlsched.report.tables import Column, render_table


@dataclass(frozen=True)
class Table:
    """``rows`` shown under ``columns`` (each naming its unit) and ``title``."""

    rows: Sequence[dict[str, Any]]
    columns: Sequence[Column]
    title: str


@dataclass(frozen=True)
class Paragraph:
    """A paragraph of text, taken literally; ``lead`` (bold on a terminal) opens it."""

    text: str
    lead: str = ""


Section = Table | Paragraph


def render_sections(sections: Sequence[Section], console: Console) -> None:
    """Print every section in order: tables with ``render_table``, paragraphs wrapped to the
    console's width."""
    for section in sections:
        if isinstance(section, Table):
            render_table(section.rows, section.columns, section.title, console)
        else:
            lead = f"[bold]{escape(section.lead)}[/] " if section.lead else ""
            console.print(lead + escape(section.text), highlight=False)
