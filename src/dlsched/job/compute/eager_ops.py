"""A Llama layer's memory-bound ops as eager PyTorch runs TorchTitan's model code, and what
torch.compile (Inductor) fuses of them (``Job.ops`` ``eager``).

The zoo's decoder (``models.zoo.gpt_model``) runs Megatron-Core / Transformer Engine's fused
kernels: one RMSNorm kernel reading its input twice, one SwiGLU kernel, one bias-dropout-add,
no separate rotary kernel. TorchTitan's Llama (``torchtitan/models/llama/model.py`` and
``torchtitan/models/norms.py`` at 9dec370, the 2024-12 benchmark's commit; the same module code
under ``models/llama3`` at 820504e and e7c0cae) writes those ops in PyTorch, and eager PyTorch
launches one kernel per ATen op, each reading its inputs from and writing its output to memory.
The kernels below are the ATen ops torch 2.x dispatches for that code, forward and backward
(PyTorch's ``tools/autograd/derivatives.yaml`` formulas; recorded on one small layer with a
``TorchDispatchMode``, ``tests/job/test_eager_ops.py``), with their bytes per element of the
op's tensor for 16-bit activations (FSDP2's bf16 parameters and activations: 2 bytes; FP32
intermediates: 4):

* **RMSNorm** (``norm_type = "rmsnorm"``, every train config at 9dec370):
  ``(x.float() * rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).type_as(x) * weight``.
  Forward, 8 kernels, 36 B: the cast to FP32 (read 2, write 4), ``pow`` (4, 4), ``mean`` (4),
  ``+ eps`` and ``rsqrt`` (one value per row), the product with the row's scale (4, 4), the
  cast back (4, 2), the product with the weight (2, 2). Backward, 16 kernels, 92 B: the
  weight's product (grad x weight: 2, 2; grad x output for the weight gradient: 4, 2; its sum
  over the tokens: 2), the cast's (2, 4), the row scale's product (grad x scale: 4, 4; grad x
  input: 8, 4; its sum over the row: 4), ``rsqrt``'s and the ``mean``'s (three per-row kernels;
  the mean's gradient expanded over the row: write 4), ``pow``'s (``grad * 2 * x.pow(1)``:
  4, 4; 4, 4; 8, 4), the sum of the FP32 input's two gradients (8, 4), the cast back (4, 2).
* **Rotary embedding** (``apply_rotary_emb``) on the queries and on the keys, per element:
  ``view_as_real(view_as_complex(xq.float().reshape(..., -1, 2)) * freqs_cis).flatten(3)
  .type_as(xq)``: forward 3 kernels, 20 B (cast 2, 4; complex product 4, 4; cast 4, 2);
  backward 4 kernels, 20 B (cast, the conjugate of ``freqs_cis`` resolved, one value per
  position and frequency, the product, the cast back).
* **repeat_kv** (grouped-query attention, ``n_rep = heads / kv_heads > 1``):
  ``unsqueeze(x, 3).expand(...).reshape(...)`` copies the keys and the values ``n_rep``
  times, per key (value) element: forward one kernel (read 2, write 2 n_rep), backward one sum
  over the copies (read 2 n_rep, write 2). ``F.scaled_dot_product_attention`` takes the
  transposed queries, keys and values as they are, and its flash output is already laid out
  ``(b, s, heads, d)`` (ATen's ``_scaled_dot_product_flash_attention`` returns the kernel's
  output transposed), so ``.transpose(1, 2).contiguous()`` copies nothing.
* **SwiGLU** (``w2(F.silu(w1(x)) * w3(x))``), per FFN-width element: forward ``silu`` (2, 2)
  and the product (4, 2): 2 kernels, 10 B; backward the product's two gradients (4, 2 each)
  and ``silu_backward`` (4, 2): 3 kernels, 18 B.
* **Residual additions** (``h = x + attention(...)``, ``out = h + feed_forward(...)``; no
  dropout, no bias): forward one ``add`` (4, 2); backward the sum of the two gradients where
  the stream forks (the next norm's and the residual's), one ``add`` (4, 2).

Per-row and per-position tensors (the RMSNorm's scale, ``freqs_cis``) are ``1 / hidden`` and
``1 / heads`` of the op's tensor: their launches are counted, their bytes left out.

**Compiled** (``torch.compile`` on each block, TorchTitan's ``apply_compile``): Inductor fuses
each run of pointwise ops and reductions over the same rows between two extern kernels (the
matmuls, SDPA) into one kernel that reads what enters the run and writes what leaves it, the
FP32 intermediates in registers (Ansel et al., "PyTorch 2", ASPLOS 2024, Sec. 5). The groups of
a Llama layer, forward / backward bytes per element:

* the residual addition and the next RMSNorm (the layer's second norm; its first norm with the
  previous layer's last addition, the layer taken cyclically): read the stream and the branch
  (2 + 2), write the sum and the normalized output (2 + 2), 1 kernel, 8 B; backward: read the
  normalized output's gradient, the saved sum and the residual gradient, write the sum's
  gradient (8 B), and the weight gradient's reduction over the tokens (read the gradient and
  the input again, 4 B, its own kernel): 2 kernels, 12 B. An RMSNorm alone (the block's first
  under recomputation): 4 B forward, 10 B backward; an addition alone 6 B and 6 B;
* the rotary embeddings and ``repeat_kv`` (read off Inductor's generated code, torch 2.13, a
  TorchTitan attention block of 8 query and 2 KV heads forward and backward: Inductor does not
  generate code for complex operators, so ``view_as_complex(...) * freqs_cis`` stays an ATen
  kernel between two Inductor kernels): the queries' as eager (cast to FP32, the complex
  product, the cast back: 20 B both ways), the cast back written by one kernel with the keys'
  (read 4, write 2 n_rep) and the values' copies (read 2, write 2 n_rep), which SDPA, an
  extern kernel, reads from memory; backward the keys' sum over the copies fused with the cast
  to FP32 (read 2 n_rep, write 4), their product and cast back, the values' sum alone;
* ``silu(w1 x) * w3 x``: read the two projections, write the product (1 kernel, 6 B); backward
  read the gradient and the two projections, write their gradients (1 kernel, 10 B).

What is not here: the embedding and the loss (the zoo's, ``compile_fusion.compiled_loss`` when
compiled) and LayerNorm models (``nn.LayerNorm`` is one ATen kernel, as the zoo's norm).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dlsched.errors import ConfigError
from dlsched.job.compute.qkv_layout import REPEAT_LABEL
from dlsched.job.model_spec import Model
from dlsched.job.run_choices import OPS
from dlsched.models.ops import Op, matmul

HALF = 2  # bytes of a 16-bit activation element: the unit of Op.elements in bf16/fp16


@dataclass(frozen=True)
class Kernel:
    """One ATen kernel: bytes ``read`` and ``written`` per element of its op's tensor;
    ``launched`` False: the bytes are this op's share of a kernel launched under another op
    (Inductor's one kernel writing the queries, keys and values before SDPA)."""

    name: str
    read: float
    written: float
    launched: bool = True


@dataclass(frozen=True)
class EagerOp:
    """An op's kernels, forward and backward (module docstring)."""

    forward: tuple[Kernel, ...]
    backward: tuple[Kernel, ...]

    def bytes(self, backward: bool) -> float:
        """Bytes read plus written per element of the op's tensor."""
        return sum(k.read + k.written for k in (self.backward if backward else self.forward))

    def launches(self, backward: bool) -> int:
        """Kernels launched."""
        return sum(k.launched for k in (self.backward if backward else self.forward))

    def op(self, label: str, elements: float, split: bool) -> Op:
        """The op on ``elements`` elements per sample, in the zoo's 16-bit element units."""
        return Op("elementwise", 0.0, elements * self.bytes(False) / HALF,
                  kernels=self.launches(False), split=split, label=label,
                  backward_kernels=self.launches(True),
                  backward_elements=elements * self.bytes(True) / HALF)


ROW = 0.0  # a per-row (or per-position) tensor's bytes per element of the op: left out
RMS_NORM = EagerOp(
    (Kernel("_to_copy fp32", 2, 4), Kernel("pow", 4, 4), Kernel("mean", 4, ROW),
     Kernel("add eps", ROW, ROW), Kernel("rsqrt", ROW, ROW), Kernel("mul scale", 4, 4),
     Kernel("_to_copy bf16", 4, 2), Kernel("mul weight", 2, 2)),
    (Kernel("mul grad weight", 2, 2), Kernel("mul grad output", 4, 2),
     Kernel("sum weight grad", 2, ROW), Kernel("_to_copy fp32", 2, 4),
     Kernel("mul grad scale", 4, 4), Kernel("mul grad input", 8, 4),
     Kernel("sum scale grad", 4, ROW), Kernel("rsqrt pow", ROW, ROW),
     Kernel("rsqrt mul", ROW, ROW), Kernel("rsqrt mul grad", ROW, ROW),
     Kernel("mean div", ROW, 4), Kernel("pow x^1", 4, 4), Kernel("mul 2", 4, 4),
     Kernel("mul grad pow", 8, 4), Kernel("add input grads", 8, 4),
     Kernel("_to_copy bf16", 4, 2)))
ROTARY = EagerOp(
    (Kernel("_to_copy fp32", 2, 4), Kernel("mul complex", 4, 4), Kernel("_to_copy bf16", 4, 2)),
    (Kernel("_to_copy fp32", 2, 4), Kernel("clone conj freqs", ROW, ROW),
     Kernel("mul complex", 4, 4), Kernel("_to_copy bf16", 4, 2)))
SWIGLU = EagerOp((Kernel("silu", 2, 2), Kernel("mul", 4, 2)),
                 (Kernel("mul grad up", 4, 2), Kernel("mul grad silu", 4, 2),
                  Kernel("silu_backward", 4, 2)))
RESIDUAL = EagerOp((Kernel("add", 4, 2),), (Kernel("add fork grads", 4, 2),))


def repeat_kv(n_rep: int) -> EagerOp:
    """``repeat_kv``'s copy of a key (value) element ``n_rep`` times (module docstring)."""
    return EagerOp((Kernel("clone expand", 2, 2 * n_rep),), (Kernel("sum copies", 2 * n_rep, 2),))


# Inductor's groups (module docstring): one kernel each, the norm's backward two.
COMPILED_NORM = EagerOp((Kernel("norm", 2, 2),),
                        (Kernel("norm grad", 4, 2), Kernel("weight grad", 4, ROW)))
COMPILED_ADD_NORM = EagerOp((Kernel("add norm", 4, 4),),
                            (Kernel("add norm grad", 6, 2), Kernel("weight grad", 4, ROW)))
COMPILED_RESIDUAL = RESIDUAL
COMPILED_ROTARY = ROTARY  # the queries': Inductor leaves the complex product to ATen
COMPILED_SWIGLU = EagerOp((Kernel("silu mul", 4, 2),), (Kernel("silu mul grad", 6, 4),))


def compiled_repeat_kv(n_rep: int, rotate: bool) -> EagerOp:
    """Compiled (module docstring): the keys' rotation (``rotate``: cast, ATen's complex
    product, the cast back written ``n_rep`` times in the queries' kernel) or the values'
    copy alone (in that kernel); backward the sum over the copies (the keys' fused with the
    cast to FP32), the keys' product and cast back."""
    if not rotate:
        return EagerOp((Kernel("clone expand", 2, 2 * n_rep, launched=False),),
                       (Kernel("sum copies", 2 * n_rep, 2),))
    return EagerOp((Kernel("_to_copy fp32", 2, 4), Kernel("mul complex", 4, 4),
                    Kernel("_to_copy bf16 expand", 4, 2 * n_rep, launched=False)),
                   (Kernel("sum copies _to_copy fp32", 2 * n_rep, 4),
                    Kernel("mul complex", 4, 4), Kernel("_to_copy bf16", 4, 2)))


def check_ops(ops: str, spec: Model) -> str:
    """``ops`` when accepted for ``spec``; ConfigError naming the field otherwise: the eager
    decomposition is TorchTitan's Llama (RMSNorm, rotary, SwiGLU, no biases)."""
    if ops not in OPS:
        raise ConfigError(f"ops: {ops!r} is not one of {', '.join(OPS)}")
    if ops == "eager":
        missing = [what for what, ok in (("rms_norm", spec.rms_norm),
                                         ("gated_ffn", spec.gated_ffn),
                                         ("rotary positions", not spec.learned_positions),
                                         ("no biases", not spec.bias),
                                         ("dense layers", not spec.experts),
                                         ("grouped-query attention", not spec.kv_lora_rank))
                   if not ok]
        if missing:
            raise ConfigError("ops: eager (TorchTitan's Llama modules) needs "
                              + ", ".join(missing) + "; accepted for other models: fused")
    return ops


def _label(op: Op) -> str:
    return op.label.rsplit(".", 1)[-1] if op.label.startswith("h.") else op.label


def torch_ops(ops: Sequence[Op], spec: Model, compiled: bool,
              cyclic: bool = False) -> tuple[Op, ...]:
    """``ops`` (the zoo's, forward order, of one block) as TorchTitan's eager modules run them,
    or Inductor's groups of them when ``compiled`` (module docstring; ``cyclic``: a layer
    repeated, its last addition fused with the next layer's first norm). GEMMs, attention and
    the zoo's embedding, head and loss stay as they are."""
    n_rep = spec.heads // spec.kv_heads if spec.kv_heads else 1
    items = list(ops)
    if compiled and cyclic and items and _label(items[-1]) == "bias-dropout-add":
        items = items[-1:] + items[:-1]  # the last addition runs with the next layer's norm
    out: list[Op] = []
    pending_add: Op | None = None  # compiled: an addition waiting for the next norm
    for op in items:
        name = _label(op)
        if name in ("ln_1", "ln_2", "ln_f"):
            tokens_h = op.elements / 3  # models.ops.norm: three passes
            if not compiled:
                out.append(RMS_NORM.op(op.label, tokens_h, op.split))
            elif pending_add is not None:
                out.append(COMPILED_ADD_NORM.op("add+" + op.label, tokens_h, op.split))
                pending_add = None
            else:
                out.append(COMPILED_NORM.op(op.label, tokens_h, op.split))
            continue
        if pending_add is not None:
            out.append(pending_add)
            pending_add = None
        if name == "bias-dropout-add":
            tokens_h = op.elements / 3.5  # models.zoo._residual: 3.5 passes
            added = (COMPILED_RESIDUAL if compiled else RESIDUAL).op("residual", tokens_h, op.split)
            if compiled:
                pending_add = added
            else:
                out.append(added)
        elif name == "swiglu":
            ffn = op.elements / 3  # models.zoo.ffn_activation: three passes
            gated = COMPILED_SWIGLU if compiled else SWIGLU
            out.append(gated.op("swiglu:silu*mul", ffn, op.split))
        elif name == REPEAT_LABEL:  # the zoo's repeat_kv: _rotary prices TorchTitan's own
            continue
        elif name == "c_attn" and op.kind == "gemm":
            out.append(op)
            out += _rotary(op.shape[0], spec, n_rep, compiled, op.split)
        else:
            out.append(op)
    if pending_add is not None:
        out.append(pending_add)
    return tuple(out)


def _rotary(tokens: int, spec: Model, n_rep: int, compiled: bool,
            split: bool) -> list[Op]:
    """The queries' and keys' rotary embeddings and the keys' and values' copies."""
    queries = tokens * spec.heads * spec.head_dim
    keys = tokens * spec.kv_heads * spec.head_dim if spec.kv_heads else queries
    if compiled:
        query = COMPILED_ROTARY.op("rotary-q", queries, split)
        if n_rep > 1:
            return [query, compiled_repeat_kv(n_rep, True).op("rotary-k+repeat_kv", keys, split),
                    compiled_repeat_kv(n_rep, False).op("repeat_kv-v", keys, split)]
        return [query, compiled_repeat_kv(1, True).op("rotary-k", keys, split)]
    out = [ROTARY.op("rotary-q", queries, split), ROTARY.op("rotary-k", keys, split)]
    if n_rep > 1:
        out += [repeat_kv(n_rep).op("repeat_kv-k", keys, split),
                repeat_kv(n_rep).op("repeat_kv-v", keys, split)]
    return out


# TorchTitan's separate linears (``wq``, ``wk``, ``wv`` on the attention's input; ``w1``, ``w3``
# on the gated FFN's): autograd sums their input gradients, one tensor of the linear's
# (gathered) input per linear, before the sequence-parallel reduce-scatter. Eager PyTorch
# accumulates each further gradient in place (``InputBuffer::add``: one ``add_``, read 2 + 2,
# write 2 bytes per element); compiled, AOTAutograd's joint graph has the adds explicit and
# Inductor fuses them into one kernel reading every gradient and writing the sum (the
# producers are matmuls, extern kernels: nothing to fuse them into). Megatron-Core's fused
# QKV and FC1 GEMMs produce one input gradient each: the zoo's ops have no such sum.
SEPARATE_LINEARS = (3, 2)  # wq/wk/wv, w1/w3


def summed_gradient_bytes(elements: float, compiled: bool) -> float:
    """Bytes (read plus written) of summing the separate linears' input gradients of one
    layer whose linears' input has ``elements`` 16-bit elements (tokens x hidden on the GPU:
    the gathered input under sequence parallelism)."""
    if compiled:
        return sum((n + 1) * HALF * elements for n in SEPARATE_LINEARS)
    return sum((n - 1) * 3 * HALF * elements for n in SEPARATE_LINEARS)


def separate_linears(op: Op, spec: Model) -> tuple[Op, ...]:
    """The zoo's fused QKV (``attn.c_attn``) or gated FC1 (``mlp.c_fc``) GEMM ``op`` as
    TorchTitan's separate bias-free linears at their own shapes (wq, wk, wv; w1, w3), each
    reading the whole input, labelled as the fused one (its TP split and memory floor apply);
    any other op as it is."""
    if op.kind != "gemm" or not op.shape:
        return (op,)
    tokens, _, fan_in, _ = op.shape
    if op.label.endswith("attn.c_attn"):
        widths = (spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim,
                  spec.kv_heads * spec.head_dim)
    elif op.label.endswith("mlp.c_fc") and spec.gated_ffn:
        widths = (spec.ffn_hidden, spec.ffn_hidden)
    else:
        return (op,)
    return tuple(matmul(op.label, fan_in, width, tokens, bias=False) for width in widths)
