"""What the FSDP2 tests share (tests/job/test_torch_runtime.py, test_fsdp2_costs.py,
test_fsdp2_pipeline.py): one small Llama-style model whose parameters they count by hand, and a
collective of constant bandwidth (imported by name: the test folder is on ``sys.path`` under
pytest's default import mode)."""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.job.model_spec import Model

# h 64, 4 heads of 16, 2 KV heads (K/V width 32), SwiGLU width 128, vocabulary 256 (a multiple
# of 128: no padding), untied: one layer is wq 64x64 + wk 64x32 + wv 64x32 + wo 64x64 (12,288)
# + w1, w3, w2 3 x 64 x 128 (24,576) + two RMSNorms 128 = 36,992 parameters; the root holds the
# embedding 256 x 64, the final norm 64 and the output 256 x 64 = 32,832.
TINY = Model("tiny-llama", layers=2, hidden=64, heads=4, seq=16, vocab=256,
             ffn_hidden=128, kv_heads=2, tied_embeddings=False, gated_ffn=True,
             bias=False, rms_norm=True, learned_positions=False)
LAYER, LINEAR, ROOT = 36_992, 36_864, 32_832
EMBEDDING, HEAD = 16_384, 16_448  # the root's: 256 x 64; the final norm 64 + output 256 x 64


@dataclass(frozen=True)
class Linear:
    """A collective at ``bandwidth`` bytes per second on the buffer, no latency."""

    bandwidth: float

    def seconds(self, num_bytes: float) -> float:
        """Seconds to move ``num_bytes`` bytes."""
        return num_bytes / self.bandwidth
