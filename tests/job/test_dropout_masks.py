"""Hidden dropout at rate 0 keeps no masks (job.memory.dropout_masks): by hand on a small
layer, with and without sequence parallelism, and the embedding's."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.job.execution import Execution
from dlsched.job.memory.dropout_masks import absent_mask_bytes
from dlsched.job.memory.per_gpu import chunk_stash, layer_activations
from dlsched.job.model_spec import Model

# h = 64, s = 32, b = 1: a mask is s h = 2,048 one-byte elements.
SMALL = Model("small", layers=4, hidden=64, heads=4, seq=32, vocab=256)
NO_DROPOUT = SMALL.replace(hidden_dropout=0.0)


def layout(sp: bool, recompute: str = "none") -> Execution:
    return Execution(tp=2, pp=1, dp=1, microbatch_size=1, global_batch=1,
                     sequence_parallel=sp, recompute=recompute)


@pytest.mark.parametrize("sp,per_mask", [(True, 1024.0), (False, 2048.0)])
def test_two_masks_a_layer_go_at_rate_zero(sp, per_mask):
    """SP splits each mask over TP 2 (1,024 B), without SP it is whole (2,048 B)."""
    assert absent_mask_bytes(SMALL, layout(sp)) == 0.0  # rate 0.1: kept
    assert absent_mask_bytes(NO_DROPOUT, layout(sp)) == 2 * per_mask
    kept, no_mask = (layer_activations(spec, layout(sp), "bf16")[0]
                     for spec in (SMALL, NO_DROPOUT))
    assert kept - no_mask == 2 * per_mask
    # the first rank's chunk: four layers' masks and the embedding's one
    stash, no_stash = (chunk_stash(spec, layout(sp), "bf16", 0)[0][0]
                       for spec in (SMALL, NO_DROPOUT))
    assert stash - no_stash == 4 * 2 * per_mask + per_mask


def test_full_recomputation_keeps_the_input_only_either_way():
    assert (layer_activations(SMALL, layout(True, "full"), "bf16")[0]
            == layer_activations(NO_DROPOUT, layout(True, "full"), "bf16")[0])


def test_rate_outside_0_1_is_refused():
    with pytest.raises(ConfigError, match="hidden_dropout"):
        SMALL.replace(hidden_dropout=1.0)
