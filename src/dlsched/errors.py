"""Errors raised at dlsched's edges; the CLI turns each kind into one line and an exit code.

``ConfigError``: invalid user input (exit code 2); its kinds ``UnitError`` (a quantity string
that does not parse) and ``PlanError`` (a collective, data-parallel or pipeline plan that breaks
a rule, e.g. one read from a file). ``RunFailure``: a run stopped for a reason
outside dlsched's code and the user's input — a rank died or hung, a worker was lost (exit
code 1). ``Cutoff``: not an error, a computation stopped early on purpose and caught by its
own caller (never reaches the CLI). Any other exception is a bug in dlsched.
"""

from __future__ import annotations

from collections.abc import Mapping


class ConfigError(ValueError):
    """Invalid user input: the message names the field, the value and what is accepted.

    ``ConfigError(reason, field)`` is the message ``field: reason``, its field kept apart
    (``field``, ``reason``) so that an edge taking the value through an option of its own names
    that option instead (``renamed("--gpu")``) without cutting the label off the text; a
    message given whole (``ConfigError("size: too big")``) has ``field`` None and ``reason``
    the whole message."""

    def __init__(self, reason: str, field: str | None = None) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason

    def renamed(self, name: str) -> ConfigError:
        """This error naming ``name`` (an option: ``--gpu``) in place of its field, or before
        its whole message when it has none."""
        return ConfigError(self.reason, name)

    def named_by(self, names: Mapping[str, str]) -> ConfigError:
        """This error naming ``names``' spelling of its field (an edge's: ``{"gpus":
        "--gpus"}``), or of each of the fields given together (``tp/pp``: ``--tp/--pp``); as
        it is when it has no field or one ``names`` lacks."""
        fields = (self.field or "").split("/")
        if not all(name in names for name in fields):
            return self
        return self.renamed("/".join(dict.fromkeys(names[name] for name in fields)))


def check_choice(field: str, value: object, accepted: tuple) -> object:
    """``value`` when it is one of ``accepted``; a ConfigError naming ``field``
    (``ConfigError.field``: a field the domain names, ``schedule``, or an edge's own option,
    ``--device``) and the accepted values otherwise."""
    if value not in accepted:
        raise ConfigError(f"{value!r} is not accepted; accepted: "
                          + ", ".join(map(str, accepted)), field)
    return value


class UnitError(ConfigError):
    """A quantity string could not be parsed; the message says what is accepted."""


class PlanError(ConfigError):
    """A plan (collective routes, data-parallel messages or pipeline orders) breaks a rule; the
    message shows the plan with the failing part marked."""


class RunFailure(RuntimeError):
    """A run that could not finish: ``str`` is one line naming what failed (e.g. the rank and
    its error); ``details`` holds the full logs (printed by the CLI with ``--debug``)."""

    def __init__(self, summary: str, details: str = "") -> None:
        super().__init__(summary)
        self.details = details


class SweepIncomplete(RunFailure):
    """Some scenarios got no row because their worker or executor failed (not the scenario):
    the rows that did finish are committed; rerun with resume to complete the sweep."""


class Cutoff(Exception):
    """Not an error: a computation stopped early on purpose (e.g. a simulation past the
    deadline its caller gave it); the caller catches it."""
