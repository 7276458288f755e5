"""Architecture rules read from the source: no import circle, no module over 500 lines."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "dlsched"


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
