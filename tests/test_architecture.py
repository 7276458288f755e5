"""Architecture rules read from the source: the layer order of every package, no import circle,
no module over 500 lines, one error hierarchy, a CLI that imports only its domains' public entry
points; and docs/architecture.md checked against them (its layer table is the enforced one, its
module lists are the modules)."""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src" / "dlsched"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "units", "validation", "config", "lazy_exports", "progress", "dlsched"),
    ("hardware", "sim", "report"),
    ("collectives", "models", "inputs"),
    ("dataparallel", "pipeline", "interop", "goodput"),
    ("training", "job"),
    ("experiments", "runtime"),
    ("sweep", "ledger"),
    ("cli", "__main__"),
)
"""The packages of ``src/dlsched`` from the bottom layer up (``dlsched``: the package's own
``__init__``; a top-level module is its own package). A package imports only packages of lower
layers, and inside its layer only what ``SAME_LAYER`` allows."""
SAME_LAYER: dict[str, frozenset[str]] = {
    "__main__": frozenset({"cli"}),
    "report": frozenset({"sim"}),
    "collectives": frozenset({"inputs"}),
    "units": frozenset({"errors"}),
    "validation": frozenset({"errors", "units"}),
    "config": frozenset({"errors", "units", "validation"}),
    "dlsched": frozenset({"lazy_exports"}),
}


def _modules() -> dict[str, Path]:
    modules = {}
    for path in SOURCE.rglob("*.py"):
        parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    """Which dlsched modules each dlsched module imports: every import statement, at module
    level or deferred inside a function (a deferred import still closes a circle), except
    those under ``if TYPE_CHECKING:``."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    prefix = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(prefix + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_circle_finder_finds_a_planted_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_circles(graph) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def test_graph_sees_deferred_and_relative_imports():
    graph = import_graph()
    assert "dlsched.errors" in graph["dlsched.hardware.device_graph"]
    assert len(graph) > 100


def test_no_import_circle_among_dlsched_modules():
    assert import_circles(import_graph()) == []


def test_no_module_over_500_lines():
    long = {name: n for name, path in _modules().items()
            if (n := len(path.read_text().splitlines())) > 500}
    assert long == {}


def test_every_exception_derives_from_the_roots_in_errors():
    """One error hierarchy: an exception class outside dlsched/errors.py derives from a class
    defined there (ConfigError, RunFailure, ...), never straight from a builtin."""
    from dlsched import errors

    roots = {n for n, v in vars(errors).items() if isinstance(v, type)
             and issubclass(v, BaseException)}
    builtins_ = {n for n, v in vars(builtins).items()
                 if isinstance(v, type) and issubclass(v, BaseException)}
    stray = []
    for name, path in _modules().items():
        if name == "dlsched.errors":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(base).rpartition(".")[2] for base in node.bases}
                looks_like_error = bases & builtins_ or node.name.endswith("Error")
                if looks_like_error and not bases & roots:
                    stray.append(f"{name}.{node.name}")
    assert stray == []


def test_one_plan_error_for_every_domain_and_it_is_a_config_error():
    from dlsched import collectives, dataparallel, errors, pipeline, units

    assert collectives.PlanError is dataparallel.PlanError is pipeline.PlanError is errors.PlanError
    assert issubclass(errors.PlanError, errors.ConfigError)
    assert units.UnitError is errors.UnitError and issubclass(errors.UnitError, errors.ConfigError)


def test_the_sweep_worker_pool_is_no_second_engine():
    """``Engine`` is the event engine of ``sim`` only; the sweep's open executor is a
    ``WorkerPool``."""
    import dlsched.sweep
    from dlsched.sim import Engine

    assert dlsched.sweep.WorkerPool.__module__ == "dlsched.sweep.executors"
    assert not hasattr(dlsched.sweep, "Engine") and Engine.__module__ == "dlsched.sim.engine"


def test_sim_imports_nothing_above_it():
    """``sim`` (engine, shared links, collective costs, Timeline) is the floor every domain
    builds on: it imports no other dlsched package."""
    graph = import_graph()
    above = {name: sorted(t for t in targets if not t.startswith("dlsched.sim"))
             for name, targets in graph.items() if name.startswith("dlsched.sim")}
    assert {name: targets for name, targets in above.items() if targets} == {}
    assert "dlsched.sim.links" in above and "dlsched.sim.collective_cost" in above


def package_of(module: str) -> str:
    """The package a dlsched module belongs to: ``dlsched.sim.links`` -> ``sim``,
    ``dlsched.errors`` -> ``errors``, ``dlsched`` -> ``dlsched``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_violations(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...],
                     same_layer: dict[str, frozenset[str]]) -> list[str]:
    """Every import ``a -> b`` between packages that does not go down the layers (a higher or
    same layer, unless ``same_layer`` allows it), as ``"module -> module"``."""
    level = {package: n for n, row in enumerate(layers) for package in row}
    bad = []
    for module, targets in sorted(graph.items()):
        source = package_of(module)
        for target in sorted(targets):
            to = package_of(target)
            if to == source or level[to] < level[source]:
                continue
            if level[to] == level[source] and to in same_layer.get(source, frozenset()):
                continue
            bad.append(f"{module} -> {target}")
    return bad


def test_layer_checker_finds_planted_violations():
    layers = (("errors",), ("sim", "report"), ("cli",))
    graph = {"dlsched.sim.links": {"dlsched.errors"}, "dlsched.report.tables": {"dlsched.sim"},
             "dlsched.errors": {"dlsched.cli.app"}, "dlsched.cli.app": {"dlsched.report"}}
    assert layer_violations(graph, layers, {}) == [
        "dlsched.errors -> dlsched.cli.app", "dlsched.report.tables -> dlsched.sim"]
    assert layer_violations(graph, layers, {"report": frozenset({"sim"})}) == [
        "dlsched.errors -> dlsched.cli.app"]


def test_every_package_has_one_layer():
    placed = [package for row in LAYERS for package in row]
    assert len(placed) == len(set(placed))
    assert set(placed) == {package_of(module) for module in _modules()}
    assert all(SAME_LAYER[p] <= set(row) for row in LAYERS for p in row if p in SAME_LAYER)


def test_every_import_goes_down_the_layers():
    """cli on top (only ``__main__`` imports it), sweep and ledger above the reproductions,
    no domain importing cli, sweep or experiments, the foundation importing nothing above it."""
    assert layer_violations(import_graph(), LAYERS, SAME_LAYER) == []


def _section(title: str) -> str:
    text = ARCHITECTURE.read_text()
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def documented_layers(section: str) -> tuple[tuple[tuple[str, ...], ...],
                                            dict[str, frozenset[str]]]:
    """The layer table of docs/architecture.md: rows ``| N | `a`, `b` | `a` → `b`, `c`; ... |``
    read bottom layer first, and the imports each row allows inside it."""
    rows: dict[int, tuple[str, ...]] = {}
    same: dict[str, frozenset[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].isdigit():
            continue
        rows[int(cells[0])] = tuple(re.findall(r"`([^`]+)`", cells[1]))
        for rule in filter(None, (part.strip() for part in cells[2].split(";"))):
            source, _, targets = rule.partition("→")
            same[source.strip(" `")] = frozenset(re.findall(r"`([^`]+)`", targets))
    assert sorted(rows) == list(range(len(rows)))
    return tuple(rows[n] for n in range(len(rows))), same


def test_the_documented_layers_are_the_enforced_ones():
    layers, same = documented_layers(_section("Layers"))
    assert [set(row) for row in layers] == [set(row) for row in LAYERS]
    assert same == SAME_LAYER


def documented_modules(section: str) -> dict[str, list[str]]:
    """Per ``### `package``` heading of docs/architecture.md's Packages section (a heading
    without a package name: the top-level modules), the ``.py`` files its bullets list."""
    listed: dict[str, list[str]] = {}
    package = None
    for line in section.splitlines():
        if line.startswith("### "):
            names = re.findall(r"`([^`]+)`", line)
            package = names[0].rstrip("/") if names else ""
            listed.setdefault(package, [])
        elif package is not None and (match := re.match(r"- `([\w/]+\.py)`", line)):
            listed[package].append(match.group(1))
    return listed


def test_every_module_is_documented_once_under_its_package():
    """Each ``.py`` file of src/dlsched (package ``__init__`` files aside) is in the module list
    of its package's section, once; every file listed exists."""
    documented = documented_modules(_section("Packages"))
    listed = sorted(f"{package}/{name}".lstrip("/") for package, names in documented.items()
                    for name in names)
    actual = sorted(path.relative_to(SOURCE).as_posix() for path in SOURCE.rglob("*.py")
                    if path.name != "__init__.py")
    assert [name for name in listed if name not in actual] == []  # listed but not in the code
    assert [name for name in actual if name not in listed] == []  # in the code, not listed
    assert len(listed) == len(set(listed))


def test_the_architecture_page_states_no_line_counts():
    """A line count goes stale with the next edit; the page states none (the 500-line rule
    aside), so the engine is not '60 lines' while it is 68."""
    counts = [m.group(0) for m in re.finditer(r"\b(\d+)[- ]lines?\b", ARCHITECTURE.read_text())
              if m.group(1) != "500"]
    assert counts == []


PARSING_AND_PRINTING = frozenset({"cli", "report", "errors", "units", "validation", "inputs",
                                  "progress", "dlsched"})
"""The packages a ``cli`` module may import anything from: its own, printing (``report``), the
error kinds, unit parsing, the input limits, the schemas' field types, the progress hook and
the version."""
ENTRY_MODULES: dict[str, frozenset[str]] = {
    **dict.fromkeys(("collectives", "dataparallel", "pipeline", "training"),
                    frozenset({"scenario", "compare"})),
    "interop": frozenset({"astra_collective"}),
    "job": frozenset({"api", "scenario"}),
    "experiments": frozenset({"reproduction", "megatron", "pipeline", "themis",
                              "themis_training", "usbyte", "vtrain", "layout_sweep",
                              "layout_plot", "attention_reproduction"}),
    "ledger": frozenset({"report", "plot", "calibrate", "user_runs"}),
}
"""Besides the names of a domain package's ``__all__``, the modules of a domain a ``cli`` module
may import from: each domain's scenario schema and its one comparison; the collective
comparison with its ASTRA-sim files (``interop.astra_collective``); the job planner's API and
scenario schema; the reproduction contract and each reproduction; the ledger's validation and
its plot."""


def _public_names(package: str) -> frozenset[str]:
    module = importlib.import_module(f"dlsched.{package}" if package != "dlsched" else package)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [name for name in vars(module) if not name.startswith("_")]
    return frozenset(names) | ENTRY_MODULES.get(package, frozenset())


def entry_point_violations(imports: dict[str, list[tuple[str, tuple[str, ...]]]],
                           public: Callable[[str], frozenset[str]]) -> list[str]:
    """Every import of a ``cli`` module (``imports``: per module, ``(imported module, names)``;
    names empty for ``import x``) from a domain that is not one of its public entry points:
    a name of the domain package's ``public`` set, or a module of ``ENTRY_MODULES``."""
    bad = []
    for module, targets in sorted(imports.items()):
        for target, names in targets:
            parts = target.split(".")
            package = package_of(target)
            if parts[0] != "dlsched" or package in PARSING_AND_PRINTING:
                continue
            inside = ".".join(parts[2:])
            if inside in ENTRY_MODULES.get(package, ()):
                continue
            if inside == "" and names:
                stray = [name for name in names if name not in public(package)]
                bad += [f"{module}: {target}.{name}" for name in stray]
            else:
                bad.append(f"{module}: {target}")
    return bad


def cli_imports() -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """Each ``dlsched.cli`` module's imports of dlsched modules, module level or deferred:
    ``(module, names)`` for ``from module import names``, ``(module, ())`` for ``import
    module``."""
    imports: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for name, path in _modules().items():
        if package_of(name) != "cli":
            continue
        found = imports.setdefault(name, [])
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.append((node.module, tuple(alias.name for alias in node.names)))
            elif isinstance(node, ast.ImportFrom):
                found.append(("dlsched.cli", ()))  # relative: inside cli
            elif isinstance(node, ast.Import):
                found += [(alias.name, ()) for alias in node.names]
    return imports


def test_entry_point_checker_finds_planted_imports():
    public = {"dataparallel": frozenset({"run_dataparallel"})}.__getitem__
    imports = {"dlsched.cli.a": [("dlsched.dataparallel", ("run_dataparallel",)),
                                 ("dlsched.dataparallel.compare", ("compare",)),
                                 ("dlsched.report.columns", ("text",)), ("typer", ()),
                                 ("dlsched.dataparallel", ("lower_bound",)),
                                 ("dlsched.dataparallel.bounds", ("lower_bound",)),
                                 ("dlsched.dataparallel.policies.usbyte", ())]}
    assert entry_point_violations(imports, public) == [
        "dlsched.cli.a: dlsched.dataparallel.lower_bound",
        "dlsched.cli.a: dlsched.dataparallel.bounds",
        "dlsched.cli.a: dlsched.dataparallel.policies.usbyte"]


def test_the_cli_imports_only_its_domains_public_entry_points():
    """No function in ``cli/`` computes a result: a ``cli`` module imports from a domain only
    the names its package exports (``__all__``) and the modules of ``ENTRY_MODULES`` (a
    scenario schema, a comparison, the job API, a reproduction), parsing and printing aside
    (``PARSING_AND_PRINTING``)."""
    assert entry_point_violations(cli_imports(), _public_names) == []
