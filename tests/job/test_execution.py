"""``Execution``: one type for a layout fixed in part (the search's input) or complete (the
evaluator's), its rank order and every communication group built from it, and its fields
declared once in src."""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from dlsched.errors import ConfigError
from dlsched.job.cluster import node_cluster
from dlsched.job.execution import GROUPS, LAYOUT_FIELDS, RANK_ORDER, Execution
from dlsched.job.run_choices import PRECISIONS

SRC = Path(__file__).resolve().parents[2] / "src" / "dlsched"


def _coordinates(rank: int, sizes: dict[str, int]) -> dict[str, int]:
    """A rank's index along each dimension of ``RANK_ORDER`` (innermost first)."""
    out = {}
    for name in RANK_ORDER:
        out[name] = rank % sizes[name]
        rank //= sizes[name]
    return out


def _groups_by_enumeration(layout: Execution, name: str) -> set[frozenset[int]]:
    """The groups ``name`` forms, found by enumerating every rank's coordinates: ranks whose
    coordinates agree outside the group's dimensions form one group (Megatron-Core's rank
    generator, written out)."""
    expert, dims = GROUPS[name]
    sizes = ({"tp": layout.etp, "cp": 1, "ep": layout.ep, "dp": layout.expert_dp,
              "pp": layout.pp} if expert else
             {"tp": layout.tp, "cp": layout.cp, "ep": 1, "dp": layout.dp, "pp": layout.pp})
    groups: dict[tuple[int, ...], set[int]] = {}
    for rank in range(layout.gpus):
        at = _coordinates(rank, sizes)
        key = tuple(at[d] for d in RANK_ORDER if d not in dims)
        groups.setdefault(key, set()).add(rank)
    return {frozenset(g) for g in groups.values()}


def _groups_by_stride(layout: Execution, name: str) -> set[frozenset[int]]:
    """The groups of ``name`` from ``group_ranks``' stride and size: each block of
    ``stride x size`` consecutive ranks holds ``stride`` groups."""
    stride, size = layout.group_ranks(name)
    block = stride * size
    return {frozenset(start + offset + i * stride for i in range(size))
            for start in range(0, layout.gpus, block) for offset in range(stride)}


LAYOUTS = [Execution(2, 2, 4, 1, 8, cp=2, ep=4, sequence_parallel=True),
           Execution(4, 1, 4, 1, 16, sequence_parallel=True, ep=8, expert_tp=1),
           Execution(2, 3, 2, 1, 4, cp=3, ep=2, expert_tp=1),
           Execution(1, 2, 8, 1, 8, ep=2)]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.label())
@pytest.mark.parametrize("name", sorted(GROUPS))
def test_every_group_is_the_rank_generators(layout: Execution, name: str) -> None:
    """Each group's stride and size partition the ranks as enumerating their coordinates in
    the rank order does, every rank in exactly one group of the group's size."""
    by_stride = _groups_by_stride(layout, name)
    assert by_stride == _groups_by_enumeration(layout, name)
    assert sorted(r for g in by_stride for r in g) == list(range(layout.gpus))
    assert {len(g) for g in by_stride} == {layout.group_ranks(name)[1]}


def test_megatrons_strides_by_hand() -> None:
    """TP 2, CP 2, DP 4, PP 2 (32 GPUs): TP ranks 1 apart, CP 2, the DP-with-CP group 2 apart
    over 8 ranks, PP 16 apart; EP 4 carved next to TP: 2 apart, expert DP 8 apart."""
    layout = LAYOUTS[0]
    assert layout.gpus == 32
    assert {name: layout.group_ranks(name) for name in GROUPS} == {
        "tp": (1, 2), "cp": (2, 2), "dp_cp": (2, 8), "pp": (16, 2),
        "expert_tp": (1, 2), "ep": (2, 4), "expert_dp": (8, 2)}


def test_a_group_spans_the_network_its_ranks_cross() -> None:
    """On 4 DGX-H100 nodes, TP 8 stays on NVLink, the DP group of 4 crosses only the NICs, and
    a group of one has no network."""
    cluster = node_cluster("dgx-h100", 32)
    layout = Execution(8, 1, 4, 1, 4)
    assert [d.size for d in layout.group("tp", cluster).dims] == [8]
    dp = layout.group("dp_cp", cluster)
    assert [d.size for d in dp.dims] == [4] and dp.dims[0].bandwidth == 50e9
    assert layout.group("cp", cluster) is None


def test_a_searched_execution_keeps_what_is_fixed() -> None:
    """``searching`` leaves every layout field None but those given; a complete execution
    fills the defaults; ``admits`` compares the fixed fields only."""
    choice = Execution.searching(global_batch=64, tp=8, expert_tp=8)
    assert choice.fixed() == {"tp": 8, "global_batch": 64, "expert_tp": 8}
    assert set(choice.missing()) == set(LAYOUT_FIELDS) - {"tp", "global_batch", "expert_tp"}
    complete = Execution(8, 2, 4, 1, 64)
    assert complete.missing() == () and complete.expert_tp is None and complete.etp == 8
    assert choice.admits(complete) and not choice.admits(replace(complete, tp=4, dp=8))


@pytest.mark.parametrize(("fields", "field"), [
    ({"tp": 0}, "tp: "), ({"schedule": "round-robin"}, "schedule: "),
    ({"zero": 4}, "zero: "), ({"cp_algorithm": "tree"}, "cp_algorithm: "),
    ({"global_batch": 63}, "global_batch: "), ({"chunks": 2}, "chunks: "),
    ({"tp": "8"}, "execution.tp"), ({"tensor_parallel": 8}, "execution.tensor_parallel")])
def test_bad_fields_are_refused_naming_the_field(fields: dict[str, object], field: str) -> None:
    """A ConfigError naming the field, not pydantic's wrapper."""
    given = {"tp": 8, "pp": 2, "dp": 4, "microbatch_size": 1, "global_batch": 64, **fields}
    with pytest.raises(ConfigError, match=re.escape(field)):
        Execution(**given)


def _string_tuples(path: Path) -> list[tuple[int, tuple[str, ...]]]:
    """(line, elements) of every literal collection of strings only in ``path``: a tuple, list
    or set, or the arguments of a ``Literal[...]`` annotation (as written, or as the text of a
    postponed annotation)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                node.value.startswith("Literal["):  # a postponed annotation's text
            try:
                node = ast.parse(node.value, mode="eval").body.slice  # type: ignore[attr-defined]
            except (SyntaxError, AttributeError):
                continue
        if isinstance(node, ast.Tuple | ast.List | ast.Set) and node.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            found.append((line, tuple(e.value for e in node.elts)))  # Literal[...]'s too
    return sorted(found)


def _copies(home: Path, copied: Callable[[set[str]], bool]) -> list[str]:
    """``path:line`` of every literal collection of strings in src outside ``home`` that
    ``copied`` calls a copy."""
    return [f"{path.relative_to(SRC)}:{line}"
            for path in sorted(SRC.rglob("*.py")) if path != home
            for line, names in _string_tuples(path) if copied(set(names))]


def test_the_layout_fields_are_declared_once_in_src() -> None:
    """No module but ``job/execution.py`` spells out the layout fields (read them from
    ``LAYOUT_FIELDS``): no literal of strings, all of them layout fields, that names half of
    them or more (a copy; a short selection such as the fields a rule concerns is no copy)."""
    assert _copies(SRC / "job" / "execution.py", lambda names: 2 * len(names) >= len(
        LAYOUT_FIELDS) and names <= set(LAYOUT_FIELDS)) == []


def test_the_precisions_are_declared_once_in_src() -> None:
    """The job's precision names (``PRECISIONS``) are spelled out only in
    ``job/run_choices.py`` (the run settings' accepted values); other modules read them: no
    tuple, list, set or ``Literal`` of precision names (``fp32``, the memory model's own, may
    sit beside them) that names three of them or more, nor one with autocast and bf16."""
    accepted = set(PRECISIONS)
    assert _copies(SRC / "job" / "run_choices.py", lambda names: names <= accepted | {"fp32"} and (
        len(names & accepted) >= 3 or {"autocast", "bf16"} <= names)) == []


def test_the_copy_checks_find_a_copy(tmp_path: Path) -> None:
    """The checks above see each way of writing a copy (so their empty lists mean something):
    a tuple, a set, a ``Literal`` and a postponed ``Literal`` annotation."""
    module = tmp_path / "copy.py"
    module.write_text('from typing import Literal\nA = ("bf16", "fp16", "fp8")\n'
                      'B = {"tp", "pp", "dp"}\nC = Literal["bf16", "fp16", "autocast"]\n'
                      'def f(x: "Literal[\'fp16\', \'bf16\', \'fp8\']") -> None: ...\n')
    found = _string_tuples(module)
    assert found == [(2, ("bf16", "fp16", "fp8")), (3, ("tp", "pp", "dp")),
                     (4, ("bf16", "fp16", "autocast")), (5, ("fp16", "bf16", "fp8"))]


def test_rank_order_is_megatrons() -> None:
    """The one statement of the order: Megatron-Core's default ``--order``."""
    assert "-".join(RANK_ORDER) == "tp-cp-ep-dp-pp"
    assert set(itertools.chain.from_iterable(d for _, d in GROUPS.values())) <= set(RANK_ORDER)


@pytest.mark.parametrize(("algorithm", "written"), [("ring", "TP2 CP2 PP1"),
                                                     ("all-to-all", "TP2 CP2-a2a PP1"),
                                                     ("all-gather", "TP2 CP2-ag PP1")])
def test_label_names_the_cp_algorithm(algorithm: str, written: str) -> None:
    """Each CP algorithm is named in the label by its own suffix (all-gather was once written
    as all-to-all's ``-a2a``)."""
    layout = Execution(tp=2, cp=2, pp=1, dp=1, chunks=1, microbatch_size=1, schedule="1f1b",
                       recompute="none", sequence_parallel=False, zero=0, cp_algorithm=algorithm)
    assert layout.label().startswith(written)


def test_fsdp2_regime_by_hand():
    """``Execution.fsdp2``: FSDP2 (sharding fsdp2 / fsdp2-split) runs ZeRO 3 over more than one
    CP x DP rank, under a pipeline schedule exactly when pp > 1; ZeRO 2, one replica (dp 1,
    cp 1) or Megatron-FSDP's ``zero`` sharding is neither regime."""
    piped = Execution(1, 2, 2, 1, 4, zero=3)
    flat = replace(piped, pp=1)
    for sharding in ("fsdp2", "fsdp2-split"):
        assert piped.fsdp2(sharding, pipelined=True)
        assert not piped.fsdp2(sharding, pipelined=False)
        assert flat.fsdp2(sharding, pipelined=False)
        assert not flat.fsdp2(sharding, pipelined=True)
        assert replace(piped, dp=1, cp=2).fsdp2(sharding, pipelined=True)  # CP ranks shard too
    for layout in (replace(piped, zero=2), replace(piped, dp=1, global_batch=2), piped):
        sharding = "zero" if layout is piped else "fsdp2"
        assert not layout.fsdp2(sharding, pipelined=True)
        assert not layout.fsdp2(sharding, pipelined=False)
