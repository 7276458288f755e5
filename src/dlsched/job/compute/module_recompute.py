"""Megatron-Core's per-module recomputation (``--recompute-granularity selective
--recompute-modules ...``): the named submodules' forwards run again in the backward and their
activations are not kept.

A layout names it as ``recompute`` ``modules:<m1>,<m2>`` (``modules_recompute``). The modules,
as Megatron-Core defines them (``megatron/core/transformer/transformer_config.py``,
``TransformerConfig.recompute_modules``, at NVIDIA/Megatron-LM d98e8a6):

* ``core_attn``: the attention core (normal checkpointing: its input, the queries, keys and
  values, kept; scores and softmax rerun: Korthikanti et al.'s selective recomputation);
* ``layernorm``: the ``input_layernorm`` and ``pre_mlp_layernorm`` (output-discarding
  checkpointing, ``CheckpointWithoutOutput``: each norm's output, the QKV projection's input
  and the FFN's (router's) input, is freed after use and recomputed before the backward needs
  it);
* ``moe_act``: the routed experts' activation (output-discarding: its output, fc2's input, is
  freed; fc1's output, the activation's input, is kept anyway); needs ``--moe-grouped-gemm``;
* ``mla_up_proj``: MLA's up projections and rotary embedding (output-discarding: the queries,
  keys and values they make are freed);
* ``mlp``: the dense FFN (normal checkpointing: its input kept, its hidden activations
  rerun; a no-op on MoE layers, whose FFN is ``moe``);
* ``moe``: the whole MoE layer (router, permutation, both All-to-Alls, experts), its input
  kept;
* ``shared_experts``: the shared experts' FFN.

Priced here: which ops run again (``recomputed``, by the zoo's op labels: the norms ``*.ln_1``
and ``*.ln_2``, the core ``layer_costs.ATTENTION_CORE``, MLA's ``*.attn.q_up`` / ``kv_up``,
the dense FFN's split ops; the MoE modules' from ``job.compute.moe_costs.routed_ops``' groups),
the FLOP they add (``flops_per_token``: matmul FLOP, what the executed-FLOP rates count; the
norms and the activation have none); the bytes a layer no longer keeps are
``job.memory.recompute_modules``'.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from dlsched.errors import ConfigError
from dlsched.job.compute.block_pricing import KernelOptions, ops_works
from dlsched.job.compute.mla import projections
from dlsched.job.compute.moe_fp8 import moe_ops_works
from dlsched.models.compute import CalibratedCompute
from dlsched.models.ops import Op

if TYPE_CHECKING:
    from dlsched.job.model_spec import Model

PREFIX = "modules:"
MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
"""The modules priced, in Megatron-Core's order of ``recompute_modules``' choices (its
GatedDeltaNet, GatedDeltaProduct and hyper-connection modules are for layers dlsched has not)."""
ATTENTION_CORE = ("scores", "softmax", "attention-dropout", "context", "flash-attention")
"""The attention core's op labels (``job.compute.layer_costs.ATTENTION_CORE``, kept equal by a
test; repeated here because layer_costs imports this module)."""
NORMS = (".ln_1", ".ln_2")  # the zoo's input_layernorm and pre_mlp_layernorm op labels
UP_PROJECTIONS = (".attn.q_up", ".attn.kv_up")  # job.compute.mla's up projections


def modules_recompute(modules: Iterable[str], field: str = "recompute_modules") -> str:
    """The layout's ``recompute`` value that recomputes ``modules`` (``modules:a,b``, in
    ``MODULES`` order); ConfigError naming ``field`` (the list's: Megatron-Core's
    ``recompute_modules``, the ledger's) for an unknown or empty list."""
    names = tuple(modules)
    unknown = [name for name in names if name not in MODULES]
    if unknown or not names:
        raise ConfigError(f"{', '.join(unknown) or 'none given'} is not a module; accepted: "
                          f"{', '.join(MODULES)}", field)
    return PREFIX + ",".join(name for name in MODULES if name in names)


def modules_of(recompute: str | None) -> frozenset[str]:
    """The modules a ``recompute`` value recomputes (empty unless ``modules:...``)."""
    if not recompute or not recompute.startswith(PREFIX):
        return frozenset()
    return frozenset(recompute.removeprefix(PREFIX).split(","))


def check_recompute_modules(recompute: str) -> None:
    """ConfigError naming the field ``recompute`` when ``recompute`` is ``modules:`` with a
    module not in ``MODULES`` (or none)."""
    modules_recompute(recompute.removeprefix(PREFIX).split(",") if recompute != PREFIX else (),
                      "recompute")


def check_for_model(recompute: str, experts: int, shared_experts: int, mla: bool) -> None:
    """ConfigError when a module names a part the model has not (Megatron-Core's
    ``TransformerConfig.__post_init__``: ``moe_act`` needs grouped MoE experts,
    ``mla_up_proj`` multi-latent attention; ``moe`` and ``shared_experts`` need them too)."""
    modules = modules_of(recompute)
    needs = {"moe_act": experts > 0, "moe": experts > 0, "shared_experts": shared_experts > 0,
             "mla_up_proj": mla}
    missing = sorted(name for name in modules if not needs.get(name, True))
    if missing:
        raise ConfigError(f"modules {', '.join(missing)} name a part the model "
                          f"has not (experts {experts}, shared experts {shared_experts}, "
                          f"MLA {mla}); accepted: "
                          + ", ".join(m for m in MODULES if needs.get(m, True)), "recompute")


def reruns_core(recompute: str) -> bool:
    """Whether the attention core runs again in the backward (``selective``, ``full`` or the
    ``core_attn`` module)."""
    return recompute in ("selective", "full") or "core_attn" in modules_of(recompute)


def recomputed(layers: Iterable[tuple[str, Op]], modules: frozenset[str]) -> tuple[Op, ...]:
    """The ops of a dense layer's attention half and FFN that ``modules`` run again, from
    ``(layer name, op)`` pairs of the zoo's decoder layer (module docstring's labels); the
    attention core of ``core_attn`` is not among them: the callers price it as they price
    ``selective`` (``reruns_core``), which it is."""
    again = []
    for name, op in layers:
        label = op.label or ""
        if (("layernorm" in modules and label.endswith(NORMS))
                or ("mla_up_proj" in modules and label.endswith(UP_PROJECTIONS))
                or ("mlp" in modules and ".mlp." in name and op.split)):
            again.append(op)
    return tuple(again)


def rerun_seconds(ops: tuple[Op, ...], batch: int, compute: CalibratedCompute,
                  kernels: KernelOptions | None) -> float:
    """Seconds ``ops`` add when they run again inside a backward: their kernels' GPU time (the
    backward's host runs ahead of the GPU, Megatron-Core's dispatcher syncs only in the
    forward: the extra launches queue behind the backward's kernels, no idle-host start);
    FP8 expert GEMMs as ``job.compute.moe_fp8`` prices them when ``kernels`` name a recipe."""
    if not ops:
        return 0.0
    options = kernels or KernelOptions()
    works = (moe_ops_works(ops, batch, compute, options, False) if options.fp8_recipe
             else ops_works(ops, batch, compute, options, False))
    return sum(work.gpu_s for work in works)


def recomputed_routed(before: tuple[Op, ...], experts: tuple[Op, ...], after: tuple[Op, ...],
                      modules: frozenset[str]) -> tuple[Op, ...]:
    """The routed ops (``moe_costs.routed_ops``' three groups: router side, experts, combine
    side with the shared experts after the unpermutation) that ``modules`` run again: ``moe``
    all of them, ``moe_act`` the experts' activation (the middle of fc1, activation, fc2),
    ``shared_experts`` the shared FFN."""
    if "moe" in modules:
        return before + experts + after
    again: tuple[Op, ...] = ()
    if "moe_act" in modules:
        again += (experts[1],)
    if "shared_experts" in modules:
        again += after[1:]
    return again


def module_flops(spec: Model) -> dict[str, float]:
    """Forward matmul FLOP per token of each module over the whole model (``2`` per weight
    element a token multiplies by, as ``Model.model_flops_per_token`` counts):
    ``core_attn`` the attention cores, ``mla_up_proj`` MLA's two up projections, ``mlp`` the
    dense layers' FFNs, ``moe`` the MoE layers' router, routed and shared experts,
    ``shared_experts`` the shared experts alone."""
    moe, h = spec.moe_layers, spec.hidden
    up = (sum(fan_in * fan_out for name, fan_in, fan_out, _ in projections(spec)
              if name in ("q_up", "kv_up")) if spec.kv_lora_rank else 0)
    shared = spec.shared_experts * spec.ffn_matrices * h * spec.expert_ffn_hidden
    routed = spec.top_k * spec.ffn_matrices * h * spec.expert_ffn_hidden
    return {"core_attn": spec.attention_core_flops() * spec.layers,
            "mla_up_proj": 2.0 * up * spec.layers,
            "mlp": 2.0 * (spec.layers - moe) * spec.ffn_matrices * h * spec.ffn_hidden,
            "moe": 2.0 * moe * (routed + shared + spec.router_parameters()),
            "shared_experts": 2.0 * moe * shared}


def flops_per_token(modules: frozenset[str], parts: dict[str, float]) -> float:
    """Matmul FLOP per token the recomputation adds over the model's: ``parts`` gives per
    token over the whole model the attention cores' (``core_attn``), the up projections'
    (``mla_up_proj``), the dense FFNs' (``mlp``), the MoE FFNs' (``moe``: router, routed and
    shared experts) and the shared experts' (``shared_experts``); the norms and the
    activation add no matmul FLOP."""
    total = sum(parts.get(name, 0.0) for name in modules if name != "moe")
    if "moe" in modules:  # the whole layer, its shared experts among it: counted once
        total += parts.get("moe", 0.0) - ("shared_experts" in modules) * \
            parts.get("shared_experts", 0.0)
    return total
