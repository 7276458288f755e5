"""The copies of the attention's inputs (job.compute.qkv_layout): Megatron-Core / Transformer
Engine's and TorchTitan's repeat_kv, checked by hand on one Llama 3 8B layer (32 query heads, 8
KV heads, head dimension 128)."""

import pytest

from dlsched.job.compute.layer_costs import decoder_model, rank_decoder
from dlsched.job.compute.qkv_layout import (
    GRAD_CAT_LABEL,
    QUERY_COPY_LABEL,
    REPEAT_LABEL,
    VALUE_COPY_LABEL,
    qkv_copy_ops,
    query_copied,
    repeat_kv_op,
)
from dlsched.job.model_spec import Model
from dlsched.models.ops import ATTENTION_KINDS

SEQ, HEADS, KV, HD = 8192, 32, 8, 128
_LLAMA = dict(name="llama3-8b", hidden=4096, layers=32, heads=HEADS, kv_heads=KV, seq=SEQ,
              vocab=128256, ffn_hidden=14336, gated_ffn=True, rms_norm=True, bias=False,
              learned_positions=False, tied_embeddings=False)


def _llama8b() -> Model:
    return Model(**_LLAMA)


def test_the_query_reshape_copies_only_with_more_than_one_group_on_the_rank() -> None:
    assert query_copied(32, 8, 1) and query_copied(64, 8, 4)  # 8 and 2 groups per rank
    assert not query_copied(128, 8, 8)  # one group per rank (405B at TP 8): a view
    assert not query_copied(32, 32, 1)  # multi-head attention: np/ng = 1, a view
    with pytest.raises(ValueError, match="kv_heads"):
        query_copied(32, 0, 1)


def test_one_layers_bytes_by_hand() -> None:
    q, kv = SEQ * HEADS * HD, SEQ * KV * HD  # 33.5M and 8.4M elements per sample
    cat, copy_q, copy_v = qkv_copy_ops(q, kv, query_copy=True, new_key=True)
    assert (copy_q.label, copy_v.label, cat.label) == (QUERY_COPY_LABEL, VALUE_COPY_LABEL,
                                                       GRAD_CAT_LABEL)
    assert copy_q.elements == 2 * 33_554_432 and copy_q.backward_elements == 0.0
    assert copy_v.elements == 2 * 8_388_608 and copy_v.launches_backward == 0.0
    # backward: read dq, dk, dv and write dqkv: 2 x (33.5M + 2 x 8.4M) = 100.7M elements
    assert cat.elements == 0.0 and cat.kernels == 0.0 and cat.launches_backward == 1.0
    assert cat.backward_elements == 100_663_296
    assert all(op.split for op in (copy_q, copy_v, cat))
    # without a new key (no rotary, no norm) the key is copied with the value
    assert qkv_copy_ops(q, kv, False, False)[1].elements == 4 * kv
    assert qkv_copy_ops(q, q, False, False) == ()  # MHA, learned positions: sbh3d


def test_the_fused_decoder_carries_them_and_the_flash_one_does_not() -> None:
    spec = _llama8b()
    labels = {op.label for layer in rank_decoder(spec, 1, "ring", "fused", 1, "local").layers
              for op in layer.ops}
    assert {QUERY_COPY_LABEL, VALUE_COPY_LABEL, GRAD_CAT_LABEL} <= labels
    at_tp8 = {op.label for layer in rank_decoder(spec, 1, "ring", "fused", 8, "local").layers
              for op in layer.ops}
    assert QUERY_COPY_LABEL not in at_tp8 and VALUE_COPY_LABEL in at_tp8
    flash = {op.label for layer in decoder_model(spec, 1, attention="flash").layers
             for op in layer.ops}  # PyTorch's SDPA (local): TorchTitan's repeat_kv instead
    assert not flash & {QUERY_COPY_LABEL, VALUE_COPY_LABEL, GRAD_CAT_LABEL}


def test_repeat_kv_by_hand_and_where_it_runs() -> None:
    kv = SEQ * KV * HD  # 8.4M key (and value) elements per sample, n_rep 4
    op = repeat_kv_op(kv, 4)
    # per tensor: read kv, write 4 kv; keys and values: 2 x 5 x 8.4M both ways
    assert op.elements == op.backward_elements == 2 * 5 * 8_388_608
    assert op.kernels == op.launches_backward == 2 and op.split
    with pytest.raises(ValueError, match="n_rep"):
        repeat_kv_op(kv, 1)
    spec = _llama8b()
    flash = [op for layer in decoder_model(spec, 1, attention="flash").layers
             for op in layer.ops]
    core = next(i for i, op in enumerate(flash) if op.kind in ATTENTION_KINDS)
    assert flash[core - 1].label == REPEAT_LABEL  # just before SDPA
    te_flash = {op.label for layer in rank_decoder(spec, 1, "ring", "flash", 1,
                                                   "transformer_engine").layers
                for op in layer.ops}
    assert REPEAT_LABEL not in te_flash and VALUE_COPY_LABEL in te_flash  # TE's flash backend
    mha = Model(**{**_LLAMA, "kv_heads": HEADS})
    assert REPEAT_LABEL not in {op.label for layer in decoder_model(mha, 1).layers
                                for op in layer.ops}
