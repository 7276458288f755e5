"""``RunSettings``: every run setting (precision, collectives, overlaps, kernels, gradient
handling) declared once, with its default and its accepted values; ``dlsched plan``'s options
and a ledger row's ``parallel`` section read it by name, and no module copies it field by field."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest
from pydantic.fields import FieldInfo

from dlsched.errors import ConfigError
from dlsched.inputs import Choices
from dlsched.job.execution import LAYOUT_FIELDS
from dlsched.job.run_settings import (
    RUN_CHOICES,
    RUN_DEFAULTS,
    RUN_FIELDS,
    RunSettings,
    run_settings_of,
)
from dlsched.job.scenario import PlanScenario
from dlsched.ledger import load_ledger
from dlsched.ledger.predict import job_and_layout
from dlsched.ledger.schema import (
    NOT_OVERLAPPED,
    OVERLAP_SETTINGS,
    PARALLEL_ONLY,
    Overlap,
    Parallelism,
)

SRC = Path(__file__).resolve().parents[2] / "src" / "dlsched"


def _accepted(annotation: object) -> set[object]:
    """The values a ``Literal`` or ``inputs.choice`` (or either ``| None``) annotation
    accepts, None left out."""
    values: set[object] = set()
    for arg in typing.get_args(annotation) or ():
        if isinstance(arg, Choices):  # inputs.choice: its names
            values |= set(arg.names)
        elif typing.get_args(arg):
            values |= _accepted(arg)
    if typing.get_origin(annotation) is typing.Literal:
        values = set(typing.get_args(annotation))
    return values - {None, type(None)}


def _option_choices(field: FieldInfo) -> set[str]:
    """The names a ``PlanScenario`` option made by ``inputs.choice`` accepts (its
    ``Choices``, on the field or inside its ``Annotated | None``)."""
    found = [m for m in field.metadata if isinstance(m, Choices)]
    for arg in typing.get_args(field.annotation):
        found += [m for m in getattr(arg, "__metadata__", ()) if isinstance(m, Choices)]
    assert len(found) == 1
    return set(found[0].names)


def test_the_run_settings_are_not_copied_field_by_field_in_src() -> None:
    """No call in src passes half the run settings or more, by keyword or read off an object
    by their names (``ledger.predict.job_and_layout`` passed 13 by keyword, ``job.api.plan``
    13 read off the scenario), and no module but ``job/run_settings.py`` spells out half of
    them in a literal (a short selection, such as the settings an export writes, is no
    copy)."""
    copies = []
    for path in SRC.rglob("*.py"):
        if path == SRC / "job" / "run_settings.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                named = {k.arg for k in node.keywords if k.arg in RUN_FIELDS} | {
                    a.attr for a in [*node.args, *(k.value for k in node.keywords)]
                    if isinstance(a, ast.Attribute) and a.attr in RUN_FIELDS}
                if 2 * len(named) >= len(RUN_FIELDS):
                    copies.append(f"{path.relative_to(SRC)}:{node.lineno}")
            if isinstance(node, ast.Tuple | ast.List) and node.elts and all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
                names = {e.value for e in node.elts}
                if 2 * len(names) >= len(RUN_FIELDS) and names <= set(RUN_FIELDS):
                    copies.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert copies == []


def test_plan_options_are_the_run_settings() -> None:
    """Each of ``dlsched plan``'s run options accepts exactly the setting's values and offers
    its default, but ``dp_policy`` (the plan prices its own overlap, ``usbyte``) and
    ``moe_probs_in_activation`` (today's Megatron-Core's behaviour; the setting's default is
    the older releases' that the ledger's earlier rows ran)."""
    options = {name: f for name, f in PlanScenario.model_fields.items() if name in RUN_FIELDS}
    assert len(options) == 20  # ops, cross_entropy, transformer_impl, master_weights: rows'
    # only (sharding became `plan --sharding` with FSDP2 under PP, 4b9ae51)
    plan_own = {"dp_policy": "usbyte", "moe_probs_in_activation": True}
    for name, option in options.items():
        if name in RUN_CHOICES:
            assert _option_choices(option) == set(RUN_CHOICES[name]), name
        assert option.default == plan_own.get(name, RUN_DEFAULTS[name]), name
    assert RUN_DEFAULTS["dp_policy"] == "none"
    assert RUN_DEFAULTS["moe_probs_in_activation"] is False


def test_a_scenario_hands_its_settings_by_name() -> None:
    """``run_settings_of`` takes every setting the scenario names, ``given`` overriding, the
    rest at their defaults."""
    scenario = PlanScenario(precision="fp16", grad_reduce="fp16", pipeline_p2p="blocking",
                            collective_policy="themis")
    run = run_settings_of(scenario, collective_policy="dlsched")
    assert run == RunSettings("fp16", "dlsched", "usbyte", grad_reduce="fp16",
                              pipeline_p2p="blocking", moe_probs_in_activation=True)
    assert (run.sharding, run.ops, run.grad_bytes) == ("zero", "fused", 2)


def test_the_ledger_section_names_each_setting_as_the_evaluator_does() -> None:
    """Every field of a row's ``parallel`` section is a layout field, a run setting under its
    name, or one of ``PARALLEL_ONLY``; a run setting there accepts only values the evaluator
    accepts; each overlap a row may list turns a run setting on, or is refused."""
    for name, field in Parallelism.model_fields.items():
        assert (name in LAYOUT_FIELDS) + (name in RUN_FIELDS) + (name in PARALLEL_ONLY) == 1, name
        if name in RUN_CHOICES:
            assert _accepted(field.annotation) <= set(RUN_CHOICES[name]), name
    for overlap in typing.get_args(Overlap):
        assert overlap in OVERLAP_SETTINGS, overlap  # every overlap a row lists is priced
    for setting, value in [*OVERLAP_SETTINGS.values(), *NOT_OVERLAPPED.items()]:
        assert setting in RUN_FIELDS and value != RUN_DEFAULTS[setting], setting
        RunSettings(**{setting: value})  # accepted


def test_ledger_rows_run_their_published_settings() -> None:
    """By hand from the rows: SC21's 1.7B (fp16, PyTorch DDP's overlapped buckets, the 2021
    unfused attention, blocking transfers) and the dgxc Llama 3.1 70B (bf16, Transformer
    Engine's norms and fused attention, TP collectives, the DP reduction and gather and the
    pipeline transfers overlapped)."""
    rows = {row.id: row for row in load_ledger()}
    sc21 = rows["sc21-t1-gpt-1.7b"].execution.run
    assert (sc21.precision, sc21.dp_policy, sc21.attention, sc21.pipeline_p2p) == (
        "fp16", "ddp", "unfused", "blocking")
    dgxc = rows["dgxc-2504-h100-llama3.1-70b-bf16-64gpu"]
    run = dgxc.execution.run
    assert (run.precision, run.transformer_impl, run.pipeline_p2p, run.dp_policy,
            run.tp_comm_overlap, run.overlap_param_gather) == (
        "bf16", "transformer_engine", "overlapped", "ddp", True, True)
    assert job_and_layout(dgxc)[1].run == run


@pytest.mark.parametrize(("fields", "field"), [({"grad_reduce": "fp8"}, "grad_reduce"),
                                                ({"compile": "yes"}, "runsettings.compile"),
                                                ({"ops": "jit"}, "ops"),
                                                ({"precision": "fp4"}, "precision")])
def test_bad_settings_are_refused_naming_the_field(fields: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        RunSettings(**fields)  # type: ignore[arg-type]


def test_the_execution_carries_the_settings_and_the_job_is_model_and_system() -> None:
    """``Job`` is what is trained and what it runs on (two fields); the settings are the
    execution's ``run`` (default: every setting at its default), a wrong type refused naming
    ``execution.run``, and ``with_run`` changes one setting and keeps the layout."""
    from dataclasses import fields

    from dlsched.job.evaluation.evaluate import Job
    from dlsched.job.execution import Execution

    assert [f.name for f in fields(Job)] == ["spec", "cluster"]
    layout = Execution(8, 2, 4, 1, 64)
    assert layout.run == RunSettings(**RUN_DEFAULTS)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^execution\.run: "):
        Execution(8, 2, 4, 1, 64, run="fp16")  # type: ignore[arg-type]
    fp16 = layout.with_run(precision="fp16")
    assert fp16.run.precision == "fp16" and fp16.row() == layout.row()
    assert fp16 != layout and fp16.label() == layout.label()
