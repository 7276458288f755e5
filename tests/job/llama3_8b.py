"""Llama 3 8B as the hand-computed job tests state it (tests/job/test_compile_async_tp.py,
test_fp8.py, test_fp8_sequence_parallel.py, test_sp_relayout.py): one shape written once,
pinned here rather than read from the bundled preset so that a preset edit cannot move the
numbers those tests compute by hand (imported by name: the test folder is on ``sys.path``
under pytest's default import mode)."""

from __future__ import annotations

from dlsched.job.model_spec import Model

# Meta, "The Llama 3 Herd of Models", 2024, Table 3, and the model card's config.json: 32
# layers, hidden 4096, 32 heads (8 KV heads), SwiGLU width 14,336, vocabulary 128,256, untied,
# RMSNorm, rotary, no biases; 8,192-token sequences.
L8 = Model("llama3-8b", 32, 4096, 32, 8192, 128256, ffn_hidden=14336, kv_heads=8,
           tied_embeddings=False, gated_ffn=True, bias=False, rms_norm=True,
           learned_positions=False)
