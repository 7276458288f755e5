"""The constants of cuDNN's fused attention kernel beyond its rate (``GpuSpec.
fused_attention_kernel``): how its time grows with the rows of tiles it runs, per pass.

cuDNN's flash-style kernel (Transformer Engine's ``FusedAttention``, Megatron-Core's
``--attention-backend fused``) gives each (sample, head, 128-query tile) one thread block,
which walks that tile's row of 128 x 128 score tiles. Its time is not the FLOP alone
(``models.fused_attention`` prices it):

* every query tile costs a fixed amount besides its row (loading Q, the softmax's final
  rescale, writing O and the log-sum-exp; in the backward the dQ accumulation and the
  preprocessing of dO·O): ``query_tile``, in the time of one full score tile of the pass;
* under the causal mask the diagonal tile is computed whole and masked, which costs more than
  an unmasked tile: ``diagonal``, the extra in tiles (the diagonal's unmasked half is already
  in the executed pairs);
* the backward's tiles run at ``backward`` times the forward's rate (the forward's asymptote
  is ``efficiency.fused_attention``);
* at head dimension 64 and below the exponentials, not the MMAs, bound a tile (FlashAttention-4,
  arXiv 2603.05451), so the rate is ``head_dim_64`` of the rate at 128 (per pass; linear in
  the head dimension between 64 and 128, 1 above).

The bundled presets take them from NVIDIA's published cuDNN benchmark
(``experiments.cudnn_attention`` fits them; ``dlsched reproduce attention`` checks them on the
shapes left out).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from dlsched.validation import Fraction


class PerPass(BaseModel):
    """One constant for the forward and one for the backward."""

    model_config = ConfigDict(extra="forbid")
    forward: float = Field(ge=0, le=100)
    backward: float = Field(ge=0, le=100)

    def of(self, backward: bool) -> float:
        """The backward's value if ``backward``, else the forward's."""
        return self.backward if backward else self.forward


class PassFractions(PerPass):
    """A fraction in (0, 1] per pass."""

    forward: Fraction
    backward: Fraction


class FusedAttentionKernel(BaseModel):
    """See the module docstring (tiles are 128 x 128 score tiles of the pass)."""

    model_config = ConfigDict(extra="forbid")
    backward: float = Field(gt=0, le=2)
    query_tile: PerPass
    diagonal: PerPass
    head_dim_64: PassFractions

    def head_dim_scale(self, head_dim: float, backward: bool) -> float:
        """The rate at ``head_dim`` over the rate at 128 (module docstring)."""
        low = self.head_dim_64.of(backward)
        if head_dim >= 128:
            return 1.0
        if head_dim <= 64:
            return low
        return low + (1.0 - low) * (head_dim - 64) / 64
