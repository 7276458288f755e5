"""Schedule actions: small immutable values with a string form that round-trips.

``2F0`` is stage 2 forward of microbatch 0; ``2B0`` its full backward; ``2I0``/``2W0`` the
input-gradient and weight-gradient halves of a split backward (zero-bubble schedules).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlsched.errors import ConfigError

KINDS = ("F", "B", "I", "W")
_PATTERN = re.compile(r"^(\d+)([FBIW])(\d+)$")


@dataclass(frozen=True, slots=True, order=True)
class Action:
    """One unit of work: ``kind`` (F, B, I or W) of ``microbatch`` on pipeline ``stage``."""

    stage: int
    kind: str
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}"

    @staticmethod
    def parse(text: str) -> Action:
        """The action written as ``text`` (e.g. ``"2F0"``)."""
        match = _PATTERN.match(text.strip())
        if match is None:
            raise ConfigError(f"action: {text!r} is not <stage><F|B|I|W><microbatch>, e.g. 2F0")
        return Action(int(match[1]), match[2], int(match[3]))

    @property
    def is_backward(self) -> bool:
        """True for B and I (the work that sends a gradient to the previous stage)."""
        return self.kind in ("B", "I")

    @property
    def frees(self) -> bool:
        """True for the action that releases the microbatch's stashed activations (B or W)."""
        return self.kind in ("B", "W")


def format_orders(orders: tuple[tuple[Action, ...], ...]) -> str:
    """One line per GPU: ``gpu<k>: 0F0 0F1 0B0 ...`` (round-trips through parse_orders)."""
    return "\n".join(f"gpu{k}: " + " ".join(map(str, order)) for k, order in enumerate(orders))


def parse_orders(text: str) -> tuple[tuple[Action, ...], ...]:
    """Inverse of format_orders."""
    orders = []
    for line in text.strip().splitlines():
        _, _, body = line.partition(":")
        orders.append(tuple(Action.parse(cell) for cell in body.split()))
    return tuple(orders)
