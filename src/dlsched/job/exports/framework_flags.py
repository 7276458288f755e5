"""How a plan's FP8 recipe, torch.compile and asynchronous TP are spelled in each framework's
configuration (``job.exports.writers`` writes them).

**Megatron-LM** (``megatron/training/arguments.py``, ``_add_transformer_engine_args``): FP8
training is ``--bf16`` with ``--fp8-format`` (``hybrid``: E4M3 forward, E5M2 gradients) and
``--fp8-recipe``, whose choices are ``delayed`` (TE ``DelayedScaling``), ``tensorwise`` (TE's
per-tensor current scaling, ``Float8CurrentScaling``), ``mxfp8`` and ``blockwise``. Delayed
scaling also takes ``--fp8-amax-history-len`` and ``--fp8-amax-compute-algo``: NeMo's FP8
mixed-precision plugin uses a history of 1024 with ``max`` (``MegatronMixedPrecision``
defaults ``fp8_amax_history_len=1024``, ``fp8_amax_compute_algo="max"``), written here; MXFP8
runs E4M3 throughout (TE's ``MXFP8BlockScaling`` default format). torchao's recipes have no
Megatron-LM spelling: their nearest (TE's current scaling) is written with a note.

**TorchTitan** (the TOML of ``torchtitan/config/job_config.py`` at 238fa99, the version
``job.exports.writers`` writes): float8 is the model converter ``quantize.linear.float8`` with its
section ``[quantize.linear.float8]`` (``recipe_name`` tensorwise or rowwise,
``enable_fsdp_float8_all_gather`` and ``precompute_float8_dynamic_scale_for_fsdp`` for the FSDP
float8 all-gather, ``filter_fqns = ["output"]``: the LM head stays bf16), MXFP8 the converter
``quantize.linear.mx`` (``recipe_name = "mxfp8_cublas"``); torch.compile is ``[compile]
enable`` over the model and the loss; asynchronous TP ``[parallelism]
enable_async_tensor_parallel``. Transformer Engine's delayed and current scaling have no
TorchTitan spelling: tensorwise (dynamic per-tensor scaling, the nearest) is written with a
note.
"""

from __future__ import annotations

AMAX_HISTORY = 1024  # NeMo's MegatronMixedPrecision fp8_amax_history_len default
MEGATRON_RECIPES = {"delayed": "delayed", "current": "tensorwise", "mxfp8": "mxfp8",
                    "tensorwise": "tensorwise", "rowwise": "tensorwise"}


def megatron_fp8_args(recipe: str | None, notes: list[str]) -> list[str]:
    """Megatron-LM's FP8 arguments for ``recipe`` (none without FP8); a note where torchao's
    recipe is written as its nearest Megatron-LM one."""
    if recipe is None:
        return []
    if recipe in ("tensorwise", "rowwise"):
        notes.append(f"torchao's {recipe} float8 has no Megatron-LM recipe: Transformer "
                     "Engine's per-tensor current scaling (--fp8-recipe tensorwise) written; "
                     "plan with --fp8-recipe current to price it")
    args = ["--fp8-format", "e4m3" if recipe == "mxfp8" else "hybrid",
            "--fp8-recipe", MEGATRON_RECIPES[recipe]]
    if recipe == "delayed":
        args += ["--fp8-amax-history-len", str(AMAX_HISTORY), "--fp8-amax-compute-algo", "max"]
    return args


def titan_run_sections(recipe: str | None, fp8_all_gather: bool, compiled: bool,
                       async_tp: bool, notes: list[str]) -> dict[str, dict[str, object]]:
    """TorchTitan TOML entries for the plan's kernels: ``model`` (its converters),
    ``parallelism`` (async TP) and the sections of their own (module docstring)."""
    out: dict[str, dict[str, object]] = {"model": {}, "parallelism": {}}
    if recipe == "mxfp8":
        out["model"]["converters"] = ["quantize.linear.mx"]
        out["quantize.linear.mx"] = {"recipe_name": "mxfp8_cublas", "filter_fqns": ["output"]}
    elif recipe is not None:
        if recipe in ("delayed", "current"):
            notes.append(f"Transformer Engine's {recipe} scaling has no TorchTitan recipe: "
                         "torchao's tensorwise written; plan with --fp8-recipe tensorwise to "
                         "price it")
        name = "rowwise" if recipe == "rowwise" else "tensorwise"
        out["model"]["converters"] = ["quantize.linear.float8"]
        out["quantize.linear.float8"] = {
            "recipe_name": name, "enable_fsdp_float8_all_gather": fp8_all_gather,
            "precompute_float8_dynamic_scale_for_fsdp": fp8_all_gather,
            "filter_fqns": ["output"]}
    if compiled:
        out["compile"] = {"enable": True, "components": ["model", "loss"]}
    if async_tp:
        out["parallelism"]["enable_async_tensor_parallel"] = True
    return out
