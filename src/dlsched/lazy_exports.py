"""Public names of a package that load their modules on first use (PEP 562), so importing the
package stays fast: ``dlsched`` for ``dlsched --version``, ``dlsched.sweep`` for commands that
only run scenarios."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, sources: dict[str, str]
                 ) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``__all__``, ``__getattr__`` and ``__dir__`` for ``package`` whose public names are the
    keys of ``sources`` (name -> the module defining it): ``__all__`` lists them sorted; a name
    is imported on first use and kept in the package."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        if name not in sources:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(sources[name]), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *sources])

    return sorted(sources), __getattr__, __dir__
