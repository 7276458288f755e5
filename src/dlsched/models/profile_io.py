"""Per-layer profiles (CSV or JSON): measured forward/backward times per layer.

This is dlsched's own format, not the torch profiler's output (torch.profiler writes Chrome-trace
JSON and operator tables, keyed by operator, not by layer): the torch runtime (``dlsched
profile``) measures each layer and writes this format, and any other tool can write it too.

CSV columns (header required): ``name, params, forward_time_s, backward_time_s`` and optionally
``activation_bytes, block, forward_flops``. JSON: ``{"name": ..., "dtype_bytes": 4, "layers":
[{...same keys...}]}``. Times are seconds for the profiled batch.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from dlsched.config import load_document, validate
from dlsched.models.layer import Layer, Model
from dlsched.validation import MAX_LAYERS, ByteSize, Duration, FlopCount, read_text_file


class LayerProfile(BaseModel):
    """One profiled layer."""

    model_config = ConfigDict(extra="forbid")
    name: str
    params: int = Field(ge=0, le=2**50)
    forward_time_s: Duration
    backward_time_s: Duration
    activation_bytes: ByteSize = 0
    forward_flops: FlopCount = 0.0
    block: str = ""


class ModelProfile(BaseModel):
    """A profiled model: layers in forward order."""

    model_config = ConfigDict(extra="forbid")
    name: str = "profiled"
    dtype_bytes: int = Field(4, ge=1, le=8)
    layers: list[LayerProfile] = Field(min_length=1, max_length=MAX_LAYERS)

    def build(self) -> Model:
        """The Model with measured times on every layer."""
        return Model(self.name, tuple(
            Layer(p.name, p.params, p.forward_flops, p.activation_bytes, p.block,
                  p.forward_time_s, p.backward_time_s) for p in self.layers), self.dtype_bytes)


def load_profile(path: str | Path) -> Model:
    """Read a CSV or JSON/YAML profile; ConfigError names the row and field of bad values."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        rows = list(csv.DictReader(io.StringIO(read_text_file(path, "profile"), newline="")))
        data = {"name": path.stem, "layers": [
            {k: v for k, v in row.items() if v not in ("", None)} for row in rows]}
    else:
        data = load_document(path)
    return validate(ModelProfile, data, f"profile {path}").build()
