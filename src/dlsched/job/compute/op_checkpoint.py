"""TorchTitan's per-op selective activation checkpointing (``--recompute selective-op``).

**The policy** (pytorch/torchtitan ``torchtitan/parallelisms/parallelize_llama.py`` at 9dec370,
``_apply_ac_to_transformer_block`` with ``selective_ac_option = "op"``, the 8B/70B/405B train
configs' setting): every transformer block runs under non-reentrant ``torch.utils.checkpoint``
with a selective-checkpoint policy. An op's output is kept (``MUST_SAVE``) when the op is on
``_save_list`` — ``aten.mm``, the SDPA flash and memory-efficient attention ops, c10d's
``reduce_scatter_tensor``, and ``abs``/``max`` (float8 scaling) — except every second
``aten.mm``: a counter of the block's matmuls (reset per block call) recomputes the 2nd, 4th,
6th ... Every other op (``PREFER_RECOMPUTE``) runs again in the backward. TorchTitan's Llama
block (``torchtitan/models/llama/model.py`` at 9dec370) calls bias-free linears, one
``aten.mm`` each, in the order wq, wk, wv, wo, w1, w3, w2 (``w2(silu(w1(x)) * w3(x))``
evaluates w1 first): wq, wv, w1 and w2 are kept, wk, wo and w3 recomputed. A non-gated FFN
(w1, w2) keeps wq, wv and w1.

**Recomputed** in the layer's backward (``recomputed_ops``, priced by the calibrated op model on
the zoo's ops of the layer, ``job.layer_costs``): the forward up to the input of the layer's
last matmul — torch's non-reentrant checkpoint stops recomputing once every tensor the
backward needs is rebuilt (``torch.utils.checkpoint.set_checkpoint_early_stop``, on by
default), and nothing after that input is needed — without what is kept: the two norms, the
unkept matmuls, the residual addition feeding the second norm, the FFN activation, and an
unfused attention core (its products are ``aten.bmm``, not on the save list); a fused kernel's
output and log-sum-exp are kept, so it does not run again. Under TP with sequence parallelism
the all-gathers feeding QKV and the FFN run again (their outputs are not kept; the
reduce-scatters' are); without it, the all-reduce after the attention projection (its output
feeds the second norm).

**Kept** per layer until its backward (``stash_elements``): the block's input (what the
checkpoint saves), each kept matmul's output (a column-parallel one's ``1 / t`` share; the
row-parallel w2's ``s b h`` partial sum whole on every TP rank), a fused attention kernel's
output and FP32 log-sum-exp, and with sequence parallelism the two reduce-scatter outputs.

Outside the policy (``check_op_checkpoint``: ConfigError): linears with biases (a biased linear
on a 3-D input runs as ``aten.addmm``, neither counted nor kept; TorchTitan's Llama has none),
MoE layers and context parallelism (TorchTitan's 2024-12 runs checkpoint neither; the ring's
and the all-to-all's attention are not the SDPA ops of the save list).
"""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.errors import ConfigError
from dlsched.job.execution import Execution
from dlsched.job.model_spec import Model
from dlsched.models.ops import ATTENTION_KINDS, Op, matmul

MODE = "selective-op"
# The zoo's fused linears (``models.zoo.gpt_model`` labels) and the TorchTitan matmuls each one
# stands for, in TorchTitan's call order.
FUSED = {"attn.c_attn": ("wq", "wk", "wv"), "attn.c_proj": ("wo",),
         "mlp.c_fc": ("w1", "w3"), "mlp.c_proj": ("w2",)}


@dataclass(frozen=True)
class Matmul:
    """One ``aten.mm`` of TorchTitan's block: ``fan_in`` x ``fan_out`` weight (elements);
    ``row_parallel``: under TP its output is a whole ``s b h`` partial sum on every rank."""

    name: str
    fan_in: int
    fan_out: int
    row_parallel: bool = False


@dataclass(frozen=True)
class Stash:
    """Elements one layer keeps per microbatch per GPU under the policy: in the activations'
    precision, and FP32 (the fused attention kernel's log-sum-exp)."""

    activations: float
    fp32: float


def layer_matmuls(spec: Model) -> tuple[Matmul, ...]:
    """The block's matmuls in call order (module docstring)."""
    h, kv, f = spec.hidden, spec.kv_heads * spec.head_dim, spec.ffn_hidden
    gate = (Matmul("w3", h, f),) if spec.gated_ffn else ()
    a, v = spec.attention_width, spec.kv_heads * spec.v_head_dim
    return (Matmul("wq", h, a), Matmul("wk", h, kv), Matmul("wv", h, v),
            Matmul("wo", spec.value_width, h, row_parallel=True), Matmul("w1", h, f), *gate,
            Matmul("w2", f, h, row_parallel=True))


def kept_matmuls(spec: Model) -> tuple[Matmul, ...]:
    """The matmuls whose outputs are kept: the 1st, 3rd, 5th ... of the block."""
    return layer_matmuls(spec)[::2]


def recomputed_matmuls(spec: Model) -> tuple[Matmul, ...]:
    """The matmuls the backward runs again: the 2nd, 4th ... but the block's last (early
    stop: its output is needed by no backward)."""
    matmuls = layer_matmuls(spec)
    return tuple(m for m in matmuls[1::2] if m is not matmuls[-1])


def check_op_checkpoint(spec: Model, layout: Execution) -> None:
    """ConfigError when ``layout`` asks for the policy where it is not defined (module
    docstring)."""
    if layout.recompute != MODE:
        return
    reasons = []
    if spec.bias:
        reasons.append("linears with biases (aten.addmm: the policy neither counts nor keeps "
                       "them; TorchTitan's Llama has none)")
    if spec.experts:
        reasons.append("MoE layers")
    if spec.kv_lora_rank:
        reasons.append("multi-head latent attention (the policy's order of matmuls is "
                       "Llama's wq, wk, wv, wo)")
    if layout.cp > 1:
        reasons.append("context parallelism (its attention is not an SDPA op of the policy's "
                       "save list)")
    if reasons:
        raise ConfigError(f"{MODE} (TorchTitan's per-op policy) is not defined "
                          f"for {', '.join(reasons)}; accepted there: none, selective, full",
                          "recompute")


def recomputed_ops(spec: Model, ops: tuple[Op, ...], tokens: int,
                   fp8: bool = False, compiled_sp: bool = False) -> tuple[Op, ...]:
    """What the backward runs again of a layer whose forward is ``ops`` (the zoo's, forward
    order) on ``tokens`` tokens per sample: every op up to the last matmul but the kept
    matmuls and a fused attention kernel, the zoo's fused linears split into TorchTitan's.

    ``fp8`` (torchao's float8 linears): their products are ``aten._scaled_mm``, neither on the
    save list nor counted by the policy's ``aten.mm`` counter (torchtitan's
    ``_op_sac_save_list``: ``aten.mm``, the SDPA ops, ``reduce_scatter_tensor`` and
    ``aten.max``, the tensorwise amax), so every FP8 linear before the last one runs again,
    casts included: the zoo's linears as they are (``job.compute.fp8`` prices them).

    ``compiled_sp``: compiled (AOTAutograd's partitioner reruns only what the backward needs,
    where eager checkpointing replays every unkept op) with sequence parallelism, the attention
    projection (wo) is not rerun: its output feeds only the reduce-scatter, whose output is
    kept (read off Inductor's generated code, ``job.communication.sp_relayout``: a block of two
    column/row-parallel pairs under the per-op policy runs no matmul again in its backward).
    Without SP its output is added to the residual stream the FFN's norm is rerun from."""
    if fp8:
        last = next(i for i, op in enumerate(ops)
                    if op.kind == "gemm" and op.label.endswith("mlp.c_proj"))
        return tuple(op for op in ops[:last] if op.kind not in ATTENTION_KINDS
                     and not (compiled_sp and op.label.endswith("attn.c_proj")))
    again = {m.name: m for m in recomputed_matmuls(spec)}
    out: list[Op] = []
    for op in ops:
        linear = next((names for suffix, names in FUSED.items()
                       if op.kind == "gemm" and op.label.endswith(suffix)), None)
        if linear == FUSED["mlp.c_proj"]:
            break
        if compiled_sp and linear == FUSED["attn.c_proj"]:
            continue
        if linear is not None:
            out += [matmul(name, again[name].fan_in, again[name].fan_out, tokens, bias=False,
                           cast_input=op.cast_input) for name in linear if name in again]
        elif op.kind not in ATTENTION_KINDS:  # a fused kernel's outputs are kept
            out.append(op)
    return tuple(out)


def recompute_flops_per_token(spec: Model, attention: str) -> float:
    """FLOP per token per layer run again: the recomputed matmuls, and an unfused attention
    core's ``4 s h`` (scores and context, as ``Model.model_flops_per_token`` counts
    them)."""
    matmuls = sum(2.0 * m.fan_in * m.fan_out for m in recomputed_matmuls(spec))
    return matmuls + (4.0 * spec.seq * spec.hidden if attention == "unfused" else 0.0)


def stash_elements(spec: Model, layout: Execution, attention: str) -> Stash:
    """Elements one layer keeps per microbatch on one GPU (module docstring); ConfigError
    where the policy is not defined."""
    check_op_checkpoint(spec, layout)
    tokens, t = spec.seq * layout.microbatch_size, layout.tp
    sp = layout.sequence_parallel
    kept = tokens * spec.hidden / (t if sp else 1)  # the block's input
    kept += sum(tokens * (spec.hidden if m.row_parallel else m.fan_out / t)
                for m in kept_matmuls(spec))
    if sp:
        kept += 2 * tokens * spec.hidden / t  # the reduce-scatters after wo and w2
    if attention == "unfused":
        return Stash(kept, 0.0)
    return Stash(kept + tokens * spec.value_width / t, tokens * spec.heads / t)
