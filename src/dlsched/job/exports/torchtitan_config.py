"""A TorchTitan job config (TOML) read into the plan's fixed fields (``dlsched plan
--from-torchtitan FILE``): the run a TorchTitan user has, priced as written.

Read from the TOML schema ``job.exports.writers`` writes (``torchtitan/config/job_config.py`` at
238fa99, the last TOML version; the older spellings ``[training] compile`` and ``[float8]``
read too):

* ``[model] flavor`` 8B / 70B / 405B -> ``llama3-8b`` / ``-70b`` / ``-405b`` (TorchTitan's llama3
  flavors, the bundled specs of the same shapes); another flavor is refused (its shape lives in
  TorchTitan's Python, not in the file);
* ``[training]`` ``seq_len``, ``local_batch_size`` (the microbatch without PP),
  ``global_batch_size`` (-1 or absent: local batch x data-parallel degree), ``mixed_precision_
  reduce`` (float32 -> ``grad_reduce`` fp32, bfloat16 -> bf16);
* ``[parallelism]`` ``tensor_parallel_degree`` (with TorchTitan's always-on sequence
  parallelism), ``pipeline_parallel_degree``, ``context_parallel_degree`` (its
  ``context_parallel_rotate_method``: allgather -> ``all-gather``, alltoall is not one of
  dlsched's and is refused), ``data_parallel_shard_degree`` (FSDP2: ZeRO 3, sharding
  ``fsdp2-split`` by ``fsdp_reshard_after_forward``; -1 = the GPUs left, searched) and
  ``data_parallel_replicate_degree`` (DDP: ZeRO 0; with sharding, HSDP, refused),
  ``pipeline_parallel_schedule`` (1F1B, Interleaved1F1B, GPipe),
  ``pipeline_parallel_microbatch_size``, ``enable_async_tensor_parallel``;
* ``[activation_checkpoint] mode`` none / full / selective with ``selective_ac_option = "op"``
  (``selective-op``; a layer interval such as "2" is refused: not a dlsched mode);
* ``[compile] enable`` (or ``[training] compile``);
* ``[model] converters`` with ``quantize.linear.float8`` (or ``float8``): precision fp8, the
  ``recipe_name`` (tensorwise when absent, torchao's default), the FSDP float8 all-gather;
  ``quantize.linear.mx``: mxfp8.

Every other key is ignored (logging, checkpointing, data). A value dlsched cannot price is
refused with one line naming the TOML key and what is accepted.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from dlsched.errors import ConfigError
from dlsched.job.run_choices import TORCHAO_RECIPES

FLAVORS = {"8B": "llama3-8b", "70B": "llama3-70b", "405B": "llama3-405b"}
SCHEDULES = {"1F1B": "1f1b", "Interleaved1F1B": "interleaved", "GPipe": "gpipe"}
RECOMPUTE = {"none": "none", "full": "full"}
CP_METHODS = {"allgather": "all-gather"}
FLOAT8_CONVERTERS = ("quantize.linear.float8", "float8")
MX_CONVERTERS = ("quantize.linear.mx", "mx")
MAX_BYTES = 1 << 20  # a job config is a few KiB


def read_torchtitan_toml(path: str | Path) -> dict[str, Any]:
    """The TOML document at ``path``; ConfigError of field ``from_torchtitan`` naming the
    file when unreadable."""
    file = Path(path)
    try:
        if file.stat().st_size > MAX_BYTES:
            raise ConfigError(f"{file} is over {MAX_BYTES} bytes; accepted: a TorchTitan job "
                              "config", "from_torchtitan")
        return tomllib.loads(file.read_text())
    except OSError as error:
        raise ConfigError(f"cannot read {file}: {error.strerror}", "from_torchtitan") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{file} is not TOML: {error}", "from_torchtitan") from None


def torchtitan_fields(path: str | Path) -> dict[str, Any]:
    """The plan fields the TorchTitan job config at ``path`` fixes (``plan_fields``); a value
    refused is named by the field ``from_torchtitan`` (the CLI's option), the file and its TOML
    key."""
    doc = read_torchtitan_toml(path)
    try:
        return plan_fields(doc)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}", "from_torchtitan") from None


def _table(doc: dict[str, Any], key: str, where: str = "") -> dict[str, Any]:
    """``doc[key]`` as a TOML table (empty when absent); ConfigError naming the key when it is
    a value instead (``parallelism = 3``)."""
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{where}{key}: {value!r} is a value, not a table; accepted: a "
                          f"[{where}{key}] table of TorchTitan's job config")
    return value


def _pick(table: dict[str, Any], key: str, mapping: dict[str, str], where: str) -> str:
    value = table[key]
    if not isinstance(value, str) or value not in mapping:
        raise ConfigError(f"{where}.{key}: {value!r} is not priced; accepted: "
                          + ", ".join(mapping))
    return mapping[value]


def _int(table: dict[str, Any], key: str, where: str, default: int, minimum: int = 1,
         unset: int | None = None) -> int:
    """``table[key]`` (``default`` when absent): an integer of at least ``minimum``, or
    ``unset`` (TorchTitan's -1: not set)."""
    value = table.get(key, default)
    accepted = f"an integer >= {minimum}" + ("" if unset is None else f", or {unset} (unset)")
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{where}.{key}: {value!r} is not an integer; accepted: {accepted}")
    if value < minimum and value != unset:
        raise ConfigError(f"{where}.{key}: {value} is out of range; accepted: {accepted}")
    return value


def _bool(table: dict[str, Any], key: str, where: str) -> bool:
    """``table[key]`` (false when absent): a TOML boolean."""
    value = table.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.{key}: {value!r} is not a boolean; accepted: true, false")
    return value


def _recompute(doc: dict[str, Any]) -> str | None:
    table = _table(doc, "activation_checkpoint")
    if "mode" not in table:
        return None
    if table["mode"] == "selective":
        option = str(table.get("selective_ac_option", "2"))
        if option != "op":
            raise ConfigError(f"activation_checkpoint.selective_ac_option: {option!r} (every "
                              "n-th layer) is not a dlsched recomputation; accepted: op")
        return "selective-op"
    return _pick(table, "mode", {**RECOMPUTE, "selective": "selective-op"},
                 "activation_checkpoint")


def _precision(doc: dict[str, Any]) -> dict[str, Any]:
    converters = _table(doc, "model").get("converters", [])
    if isinstance(converters, str):
        converters = [name.strip() for name in converters.split(",") if name.strip()]
    if not isinstance(converters, list) or not all(isinstance(c, str) for c in converters):
        raise ConfigError(f"model.converters: {converters!r} is not a list of names; accepted: "
                          "a list of strings such as [\"quantize.linear.float8\"]")
    if any(name in MX_CONVERTERS for name in converters):
        return {"precision": "fp8", "fp8_recipe": "mxfp8"}
    if not any(name in FLOAT8_CONVERTERS for name in converters):
        return {}
    table = _table(_table(_table(doc, "quantize"), "linear", "quantize."), "float8",
                   "quantize.linear.") or _table(doc, "float8")
    recipe = table.get("recipe_name") or "tensorwise"
    if not isinstance(recipe, str) or recipe not in TORCHAO_RECIPES:
        raise ConfigError(f"quantize.linear.float8.recipe_name: {recipe!r} is not priced; "
                          "accepted: " + ", ".join(TORCHAO_RECIPES))
    return {"precision": "fp8", "fp8_recipe": recipe,
            "fp8_all_gather": _bool(table, "enable_fsdp_float8_all_gather", "float8")}


def _data_parallel(par: dict[str, Any], pp: int) -> dict[str, Any]:
    """``[parallelism]``'s data parallelism as plan fields: DDP (replicate degree) as ZeRO 0,
    FSDP (shard degree; -1: searched) as ZeRO 3 with its sharding under ``pp`` pipeline stages
    (``_sharding``); HSDP refused."""
    shard = _int(par, "data_parallel_shard_degree", "parallelism", -1, unset=-1)
    replicate = _int(par, "data_parallel_replicate_degree", "parallelism", 1)
    if replicate > 1 and shard != 1:
        raise ConfigError("parallelism.data_parallel_replicate_degree: HSDP (replicated and "
                          "sharded) is not a dlsched layout; accepted: 1, or "
                          "data_parallel_shard_degree = 1 (DDP)")
    if replicate > 1:
        return {"dp": replicate, "zero": 0}
    return {"dp": None if shard == -1 else shard, "zero": 3, "sharding": _sharding(par, pp)}


def _sharding(par: dict[str, Any], pp: int) -> str:
    """FSDP2 as TorchTitan at 238fa99 wraps it (``fsdp2-split``) under the config's
    ``fsdp_reshard_after_forward``: ``default``, or ``never`` with PP (what ``default`` is
    there); ``always`` without PP (``fsdp2-split`` keeps [norm, output] unsharded where
    ``always`` reshards it: 2 B per head parameter more than the run holds). ``always`` with PP
    (per-microbatch gathers under the pipeline) and ``never`` without it are not priced."""
    policy = par.get("fsdp_reshard_after_forward", "default")
    if policy == "default" or (policy == "never" and pp > 1) or (policy == "always" and pp == 1):
        return "fsdp2-split"
    raise ConfigError(f"parallelism.fsdp_reshard_after_forward: {policy!r} with "
                      f"pipeline_parallel_degree {pp} is not priced (FSDP2 is priced as "
                      "TorchTitan's default: resharded after forward without PP, gathered once "
                      "per iteration with it); accepted: default"
                      + (", never" if pp > 1 else ", always"))


def plan_fields(doc: dict[str, Any]) -> dict[str, Any]:
    """The ``PlanScenario`` fields a TorchTitan config fixes (module docstring)."""
    model, training = _table(doc, "model"), _table(doc, "training")
    par = _table(doc, "parallelism")
    fields: dict[str, Any] = {"attention": "flash"}  # TorchTitan's llama3 runs SDPA's flash
    if "flavor" in model:
        fields["model"] = _pick(model, "flavor", FLAVORS, "model")
    if "seq_len" in training:
        fields["seq"] = _int(training, "seq_len", "training", 0)
    tp = _int(par, "tensor_parallel_degree", "parallelism", 1)
    pp = _int(par, "pipeline_parallel_degree", "parallelism", 1)
    cp = _int(par, "context_parallel_degree", "parallelism", 1)
    fields |= {"tp": tp, "pp": pp, "cp": cp, "sequence_parallel": tp > 1,
               **_data_parallel(par, pp)}
    if cp > 1:
        fields["cp_algorithm"] = _pick({"m": par.get("context_parallel_rotate_method",
                                                     "allgather")}, "m", CP_METHODS,
                                       "parallelism.context_parallel_rotate_method")
    local = _int(training, "local_batch_size", "training", 8)
    fields["microbatch_size"] = (
        _int(par, "pipeline_parallel_microbatch_size", "parallelism", 1) if pp > 1 else local)
    if pp > 1:
        schedule = _pick(par, "pipeline_parallel_schedule", SCHEDULES, "parallelism") \
            if "pipeline_parallel_schedule" in par else "1f1b"
        fields["schedule"] = schedule
    batch = _int(training, "global_batch_size", "training", -1, unset=-1)
    if batch > 0:
        fields["global_batch"] = batch
    elif fields["dp"] is not None:
        fields["global_batch"] = local * fields["dp"]
    if "mixed_precision_reduce" in training:
        fields["grad_reduce"] = _pick(training, "mixed_precision_reduce",
                                      {"float32": "fp32", "bfloat16": "bf16"}, "training")
    recompute = _recompute(doc)
    if recompute is not None:
        fields["recompute"] = recompute
    compiled = _table(doc, "compile")
    fields["compile"] = _bool(compiled if "enable" in compiled else training,
                              "enable" if "enable" in compiled else "compile",
                              "compile" if "enable" in compiled else "training")
    fields["async_tp"] = _bool(par, "enable_async_tensor_parallel", "parallelism")
    return fields | _precision(doc)
