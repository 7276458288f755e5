"""Coarsening a model into blocks, and chain files."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.models.layer import Layer, Model
from dlsched.pipeline import chain_from_model
from dlsched.pipeline.chains.model_source import load_chain


def test_layers_group_into_blocks() -> None:
    """Consecutive layers sharing ``block`` become one block: FLOP x microbatch size, the last
    layer's activation, parameters x 4 bytes (FP32 gradients, Megatron's default with BF16),
    every layer's activation stashed, 18 bytes of static state per parameter by default."""
    layers = (Layer("a.w", 10, 100.0, 7, "a"), Layer("a.b", 2, 20.0, 5, "a"),
              Layer("b.w", 4, 50.0, 3, "b"))
    chain = chain_from_model(Model("m", layers, dtype_bytes=2), microbatch_size=4)
    assert chain.block_names == ("a", "b")
    assert chain.forward_flops.tolist() == [480.0, 200.0]
    assert chain.backward_flops.tolist() == [960.0, 400.0]
    assert chain.activation_bytes.tolist() == [20.0, 12.0]
    assert chain.param_bytes.tolist() == [48.0, 16.0]
    assert chain.stash_bytes.tolist() == [48.0, 12.0]
    assert chain.static_bytes(0, 2) == 18 * 16.0


def test_profiled_times_become_reference_flops() -> None:
    """A layer with profiled seconds and no FLOP count is priced on the reference GPU."""
    layers = (Layer("x", 1, 0.0, 1, "x", forward_time=0.5, backward_time=1.5),)
    chain = chain_from_model(Model("m", layers), microbatch_size=1)
    assert chain.forward_flops.tolist() == [0.5e12]
    assert chain.backward_flops.tolist() == [1.5e12]


def test_chain_file_errors(tmp_path) -> None:
    """Chain files are validated with field names."""
    path = tmp_path / "c.yaml"
    path.write_text("blocks:\n  - {name: a, forward_flops: 1e9, activation: lots}\n")
    with pytest.raises(ConfigError, match="activation"):
        load_chain(path, 1)
    with pytest.raises(ConfigError, match="microbatch_size: 0"):
        chain_from_model(Model("m", (Layer("x", 1, 1.0, 1),)), 0)
