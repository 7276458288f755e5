"""How a plan's FP8 recipe, torch.compile and asynchronous TP are spelled in each framework's
configuration (``job.exports.writers`` writes them).

**Megatron-LM** (``megatron/training/arguments.py``, ``_add_transformer_engine_args``): FP8
training is ``--bf16`` with ``--fp8-format`` (``hybrid``: E4M3 forward, E5M2 gradients) and
``--fp8-recipe``, whose choices are ``delayed`` (TE ``DelayedScaling``), ``tensorwise`` (TE's
per-tensor current scaling, ``Float8CurrentScaling``), ``mxfp8`` and ``blockwise``. Delayed
scaling also takes ``--fp8-amax-history-len`` and ``--fp8-amax-compute-algo``: NeMo's FP8
mixed-precision plugin uses a history of 1024 with ``max`` (``MegatronMixedPrecision``
defaults ``fp8_amax_history_len=1024``, ``fp8_amax_compute_algo="max"``), written here; MXFP8
runs E4M3 throughout (TE's ``MXFP8BlockScaling`` default format). NVFP4 is not an
``--fp8-recipe``: ``--fp4-format e2m1 --fp4-recipe nvfp4`` without ``--fp8-format``
(``TransformerConfig.fp4`` / ``fp4_recipe``, megatron/core/transformer/transformer_config.py at
8f1c2f8, Megatron-Bridge df0289c's submodule; ``arguments.py`` refuses both formats at once).
torchao's recipes have no Megatron-LM spelling: their nearest (TE's current scaling) is
written with a note.

The MoE run settings (NVIDIA/Megatron-LM d98e8a6, 2026-08-22: ``TransformerConfig`` /
``ModelParallelConfig`` fields, generated as options, and ``megatron/training/arguments.py``):
the dispatcher ``alltoall`` is ``--moe-token-dispatcher-type alltoall``, ``deepep`` and
``hybridep`` the flex dispatcher ``--moe-token-dispatcher-type flex
--moe-flex-dispatcher-backend deepep | hybridep`` (``moe_enable_deepep``, older Megatron-LM's
``--moe-enable-deepep``, is deprecated there and set the backend to deepep); the EP All-to-All
overlap ``--overlap-moe-expert-parallel-comm --delay-wgrad-compute``, which
``TransformerConfig.__post_init__`` refuses (besides ``job.evaluation.a2a_overlap.
check_a2a_overlap``'s EP, schedule and recomputation) without ``--bf16``/``--fp16`` and with
more than one MTP layer; the CUDA graph scope by ``--cuda-graph-impl transformer_engine`` with
``--cuda-graph-modules moe_router moe_preprocess`` (``moe``; ``attn`` added for ``attn+moe``;
``--cuda-graph-scope`` is its deprecated spelling and ``--enable-cuda-graph`` /
``--external-cuda-graph`` the deprecated impls ``local`` / ``transformer_engine``) and a
full-iteration graph by ``--cuda-graph-impl full_iteration``, which ``validate_args`` runs only
with ``--no-check-for-nan-in-loss-and-grad`` (Megatron-Bridge's ``full_iteration`` scope).
TorchTitan has none of the three: a plan priced with one is refused for its TOML.

**TorchTitan** (the TOML of ``torchtitan/config/job_config.py`` at 238fa99, the version
``job.exports.writers`` writes): float8 is the model converter ``quantize.linear.float8`` with its
section ``[quantize.linear.float8]`` (``recipe_name`` tensorwise, rowwise or rowwise_with_gw_hp,
``enable_fsdp_float8_all_gather`` and ``precompute_float8_dynamic_scale_for_fsdp`` for the FSDP
float8 all-gather, ``filter_fqns = ["output"]``: the LM head stays bf16), MXFP8 the converter
``quantize.linear.mx`` (``recipe_name = "mxfp8_cublas"``); torch.compile is ``[compile]
enable`` over the model and the loss; asynchronous TP ``[parallelism]
enable_async_tensor_parallel``. Transformer Engine's delayed and current scaling have no
TorchTitan spelling: tensorwise (dynamic per-tensor scaling, the nearest) is written with a
note; TE's NVFP4 has no converter written here (a note says so).
"""

from __future__ import annotations

from dlsched.errors import ConfigError
from dlsched.job.run_choices import TORCHAO_RECIPES
from dlsched.job.run_settings import RunSettings

AMAX_HISTORY = 1024  # NeMo's MegatronMixedPrecision fp8_amax_history_len default
MEGATRON_RECIPES = {"delayed": "delayed", "current": "tensorwise", "mxfp8": "mxfp8",
                    "tensorwise": "tensorwise", "rowwise": "tensorwise",
                    "rowwise_with_gw_hp": "tensorwise"}


def megatron_fp8_args(recipe: str | None, notes: list[str]) -> list[str]:
    """Megatron-LM's FP8 arguments for ``recipe`` (none without FP8); a note where torchao's
    recipe is written as its nearest Megatron-LM one."""
    if recipe is None:
        return []
    if recipe == "nvfp4":  # Megatron-Core's TransformerConfig fp4 / fp4_recipe (8f1c2f8)
        return ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
    if recipe in TORCHAO_RECIPES:
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
    elif recipe == "nvfp4":
        notes.append("Transformer Engine's NVFP4 recipe has no TorchTitan converter here: no "
                     "quantization written (the plan's prices are NVFP4's)")
    elif recipe is not None:
        if recipe in ("delayed", "current"):
            notes.append(f"Transformer Engine's {recipe} scaling has no TorchTitan recipe: "
                         "torchao's tensorwise written; plan with --fp8-recipe tensorwise to "
                         "price it")
        name = recipe if recipe in TORCHAO_RECIPES else "tensorwise"
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


FLEX_BACKENDS = ("deepep", "hybridep")  # --moe-flex-dispatcher-backend's, d98e8a6
CUDA_GRAPH_MODULES = {"moe": ("moe_router", "moe_preprocess"),
                      "attn+moe": ("attn", "moe_router", "moe_preprocess")}
"""``--cuda-graph-modules`` of each per-layer scope (``CudaGraphModule`` names, d98e8a6)."""


def megatron_dispatcher_args(dispatcher: str) -> list[str]:
    """``--moe-token-dispatcher-type`` (and the flex backend) of the run's ``moe_dispatcher``."""
    if dispatcher in FLEX_BACKENDS:
        return ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend",
                dispatcher]
    return ["--moe-token-dispatcher-type", "alltoall"]


def megatron_a2a_overlap_args(run: RunSettings, mtp_layers: int) -> list[str]:
    """The EP All-to-All overlap's two switches when ``run`` asks for it; ConfigError naming
    the setting where Megatron-Core refuses it beyond the evaluator's checks (no 16-bit
    model: ``autocast``; more than one MTP layer)."""
    if not run.moe_a2a_overlap:
        return []
    if run.precision == "autocast":
        raise ConfigError("Megatron-Core runs the EP All-to-All overlap only with a bf16 or "
                          "fp16 model, and autocast exports neither; accepted for "
                          "--megatron-args: --precision bf16, fp16 or fp8", "moe_a2a_overlap")
    if mtp_layers > 1:
        raise ConfigError(f"Megatron-Core allows at most one MTP layer with the EP All-to-All "
                          f"overlap, the model has {mtp_layers}; accepted: a model with 0 or 1 "
                          "MTP layers, or leave it out", "moe_a2a_overlap")
    return ["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]


def megatron_cuda_graph_args(scope: str) -> list[str]:
    """The CUDA graph implementation and modules of the run's ``cuda_graph`` scope."""
    if scope == "full":
        return ["--cuda-graph-impl", "full_iteration", "--no-check-for-nan-in-loss-and-grad"]
    if scope in CUDA_GRAPH_MODULES:
        return ["--cuda-graph-impl", "transformer_engine", "--cuda-graph-modules",
                *CUDA_GRAPH_MODULES[scope]]
    return []


def check_titan_runs(run: RunSettings) -> None:
    """ConfigError naming the first run setting TorchTitan cannot run (module docstring): a
    flex dispatcher, the EP All-to-All overlap, a CUDA graph scope."""
    if run.moe_dispatcher != "alltoall":
        raise ConfigError(f"{run.moe_dispatcher} (Megatron-Core's flex dispatcher) has no "
                          "TorchTitan equivalent; accepted for --torchtitan-toml: alltoall",
                          "moe_dispatcher")
    if run.moe_a2a_overlap:
        raise ConfigError("Megatron-Core's EP All-to-All overlap has no TorchTitan "
                          "equivalent; accepted for --torchtitan-toml: leave it out",
                          "moe_a2a_overlap")
    if run.cuda_graph != "none":
        raise ConfigError(f"{run.cuda_graph} (Transformer Engine's CUDA graphs) has no "
                          "TorchTitan equivalent; accepted for --torchtitan-toml: none",
                          "cuda_graph")
