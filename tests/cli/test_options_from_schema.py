"""Every command's options come from one schema: ``collective``, ``dataparallel``, ``pipeline
plan``, ``train`` and ``plan`` take exactly their domain schema's fields as options (plus where
results go), named, defaulted and helped as the schema says; the command functions declare none of
them; the command line, the sweep and the Python API build the same scenario object."""

from __future__ import annotations

import inspect
import json
from typing import Any

import pytest
import typer

from dlsched.cli.app import commands
from dlsched.cli.schema_options import Given, field_option
from dlsched.collectives.scenario import CollectiveScenario
from dlsched.dataparallel.scenario import DataParallelScenario
from dlsched.inputs import Several
from dlsched.job.scenario import PlanScenario
from dlsched.pipeline.scenario import PipelineScenario
from dlsched.training.scenario import TrainingScenario

OUTPUTS = {"json_out", "csv", "trace", "plot", "save", "show_plan", "megatron_args",
           "torchtitan_toml"}
"""Where results go and how they are shown: the command's own options, not scenario fields."""
COMMANDS = [(("collective",), CollectiveScenario), (("dataparallel",), DataParallelScenario),
            (("pipeline", "plan"), PipelineScenario), (("train",), TrainingScenario),
            (("plan",), PlanScenario)]


def _click_command(path: tuple[str, ...]) -> Any:
    """The parser's command at ``path`` (typer's own click: its groups and contexts)."""
    command = typer.main.get_command(commands())
    for name in path:
        command = command.get_command(typer.Context(command), name)
    return command


def _function(path: tuple[str, ...]):
    from dlsched.cli.collective import collective
    from dlsched.cli.dataparallel import dataparallel
    from dlsched.cli.pipeline import plan
    from dlsched.cli.plan import plan as plan_job
    from dlsched.cli.training import train

    return {("collective",): collective, ("dataparallel",): dataparallel,
            ("pipeline", "plan"): plan, ("train",): train, ("plan",): plan_job}[path]


@pytest.mark.parametrize(("path", "schema"), COMMANDS, ids=lambda v: getattr(v, "__name__", v))
def test_the_options_are_the_schemas_fields_and_where_results_go(path, schema):
    params = {p.name: p for p in _click_command(path).params}
    assert set(params) - OUTPUTS == set(schema.model_fields), path
    for name, field in schema.model_fields.items():
        option = params[name]
        several = next((m for m in field.metadata if isinstance(m, Several)), None)
        assert option.opts[0] == "--" + name.replace("_", "-")
        assert option.default == (several.default if several else field.default), name
        assert option.help.startswith((field.description or "").rstrip(".")), name


@pytest.mark.parametrize(("path", "schema"), COMMANDS, ids=lambda v: getattr(v, "__name__", v))
def test_the_command_functions_declare_no_schema_field(path, schema):
    """The function under the generated options names none of the schema's fields: each is
    declared once, in the domain's schema."""
    own = inspect.signature(_function(path).__wrapped__).parameters
    assert "given" in own and not set(own) & set(schema.model_fields)


@pytest.mark.parametrize(("path", "schema"), COMMANDS, ids=lambda v: getattr(v, "__name__", v))
def test_the_options_defaults_build_the_schemas_default_scenario(path, schema):
    """The command line's defaults, as typed ("1 GB", "1343 MiB"), validate to the schema's
    default scenario (the field that takes several: its first value)."""
    params = _click_command(path).params
    given = Given(schema, {p.name: p.default for p in params if p.name in schema.model_fields})
    scenarios = given.scenarios()
    several = [n for n, f in schema.model_fields.items()
               if any(isinstance(m, Several) for m in f.metadata)]
    assert len(several) == 1
    default = schema()
    for scenario in scenarios:
        assert scenario.model_dump(exclude=set(several)) == \
            default.model_dump(exclude=set(several))
    names = [getattr(s, several[0]) for s in scenarios]
    assert names == given.names(several[0]) and len(names) == len(set(names)) >= 1


def test_a_unit_default_is_parsed_and_limits_show_in_the_help():
    size = field_option("size", CollectiveScenario.model_fields["size"])
    assert size.kind is str and size.default == "1 GB" and CollectiveScenario().size == 10**9
    chunks = field_option("chunks", CollectiveScenario.model_fields["chunks"])
    assert chunks.kind is int and chunks.help == "Chunks per collective (1..4,096)."
    reserve = field_option("memory_reserve", PipelineScenario.model_fields["memory_reserve"])
    assert reserve.kind is str and PipelineScenario().memory_reserve == 1343 * 2**20


def test_cli_and_api_run_the_same_collective(run_cli):
    """``dlsched collective`` and ``CollectiveScenario(...).run()`` (what a sweep runs) give
    the same time; the new ``--latency-scale 0`` removes every step latency, never slower."""
    times = {}
    for scale in ("1", "0"):
        code, out, err = run_cli("collective", "--size", "64 MiB", "--chunks", "8", "--policy",
                                 "themis", "--latency-scale", scale, "--json")
        assert code == 0, err
        row, = json.loads(out)["rows"]
        api = CollectiveScenario(size="64 MiB", chunks=8, policy="themis",
                                 latency_scale=float(scale)).run()
        assert row["time_s"] == api.time_s
        times[scale] = api.time_s
    assert times["0"] < times["1"]


def test_a_bad_option_is_named_as_the_option(run_cli):
    code, _, err = run_cli("collective", "--size", "0", "--json")
    assert code == 2 and err.startswith("error: --size: ") and "\n" not in err.strip()
    code, _, err = run_cli("train", "--policy", "fastest", "--json")
    assert code == 2 and err.startswith("error: --policy: unknown ['fastest']")
