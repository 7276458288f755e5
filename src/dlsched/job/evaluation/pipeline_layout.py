"""Megatron-Core's pipeline layout: every virtual stage's modules listed by hand.

Megatron-Core's ``pipeline_model_parallel_layout`` (``--pipeline-model-parallel-layout``;
``megatron/core/transformer/pipeline_parallel_layer_layout.py``, ``PipelineParallelLayerLayout``,
read at NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553) places the embedding, the
decoder layers, the multi-token-prediction (MTP) modules and the loss on the ``pp x chunks``
virtual stages as a string lists them, one stage after another between ``|``:

* ``E`` the input embedding, ``t`` a decoder (transformer) layer, ``m`` an MTP module, ``L`` the
  output layer and loss (its ``char2layer_type``);
* ``x*n``: ``n`` of the character ``x``; ``(...)*n``: ``n`` copies of the bracketed text, which
  may hold ``|`` (no brackets inside brackets: its unrolling pattern ``\\(([^)]+)\\)\\*(\\d+)``),
  unrolled before ``x*n``; commas are cosmetic and dropped.

Stage ``i`` of the list is chunk ``i // pp`` of pipeline rank ``i % pp`` (``layout[vpp_rank *
pp + pp_rank]``), dlsched's order of virtual stages (``job.pipeline_split``), and the layer ids
follow that order (``get_layer_offset``). Megatron-Core requires (``validate_layer_layout``):
the stage count a multiple of ``pp`` (the quotient is the virtual pipeline size), the first
module ``E`` and the last ``L``, each once, ``num_layers`` decoder layers, ``mtp_num_layers``
MTP modules, no decoder layer after an MTP module and the MTP modules in the last chunk of a
rank. dlsched prices the embedding on the first virtual stage and the loss with the MTP
modules on the last (``job.evaluation.replica``, ``job.compute.mtp_costs``), so a layout that
puts them elsewhere (Megatron-Core's standalone MTP stage, an embedding after an empty first
stage) is refused naming ``pipeline_split``.

Megatron-Bridge's DeepSeek-V3 recipe (``set_deepseek_v3_pipeline_model_parallel_layout``,
``src/megatron/bridge/recipes/deepseek/deepseek_v3.py`` at NVIDIA-NeMo/Megatron-Bridge df0289c)
gives PP 4 x VP 4, PP 8 x VP 2 and PP 16 the layout ``Et*4|(t*4|)*14tmL``: the embedding and 4
layers, 14 stages of 4, then one layer with the MTP module and the loss (61 layers), which
neither the even split nor the accounting options (``account-embedding-loss``: 3, 4 x 14, 2)
place.
"""

from __future__ import annotations

import re
from functools import lru_cache

from dlsched.errors import ConfigError

PREFIX = "layout:"
"""``Execution.pipeline_split`` of a layout: ``layout:`` and Megatron-Core's string."""
MODULES = {"E": "embedding", "t": "decoder", "m": "mtp", "L": "loss"}
"""The layout's characters and the modules they stand for (Megatron-Core's ``LayerType``)."""
SYNTAX = ("E (embedding), t (decoder layer), m (MTP module), L (loss), | between virtual "
          "stages, x*n and (...)*n repeats, commas ignored; e.g. Et*4|(t*4|)*14tmL")
_GROUP = re.compile(r"\(([^()]+)\)\*(\d+)")  # a bracketed repeat, unrolled first
_SINGLE = re.compile(r"([^()*|])\*(\d+)")  # a one-character repeat


def layout_of(split: str | None) -> str:
    """The layout string of a ``pipeline_split`` value (empty unless ``layout:...``)."""
    if not split or not split.startswith(PREFIX):
        return ""
    return split.removeprefix(PREFIX)


def _refuse(text: str, why: str) -> ConfigError:
    return ConfigError(f"layout {text!r}: {why}; accepted: {SYNTAX}", "pipeline_split")


@lru_cache(maxsize=256)
def parse_layout(text: str) -> tuple[str, ...]:
    """The virtual stages of a Megatron-Core layout string, each as its module characters in
    order (``"Et*2|tL"`` -> ``("Ett", "tL")``); ConfigError naming ``pipeline_split`` on a
    character, bracket or repeat outside ``SYNTAX``."""
    flat = text.replace(",", "")
    flat = _GROUP.sub(lambda match: match.group(1) * int(match.group(2)), flat)
    flat = _SINGLE.sub(lambda match: match.group(1) * int(match.group(2)), flat)
    stray = sorted(set(flat) - set(MODULES) - {"|"})
    if stray:
        raise _refuse(text, f"{''.join(stray)!r} left after unrolling the repeats")
    return tuple(flat.split("|"))


@lru_cache(maxsize=256)
def layout_spans(text: str, layers: int, pp: int, chunks: int,
                 mtp: int = 0) -> tuple[range, ...]:
    """The decoder-layer indices of each virtual stage a layout places (module docstring) for
    ``layers`` layers and ``mtp`` MTP modules on ``pp x chunks`` stages; ConfigError naming
    ``pipeline_split`` when Megatron-Core would refuse the layout or dlsched cannot price its
    placement."""
    stages = parse_layout(text)
    if len(stages) != pp * chunks:
        raise ConfigError(f"layout {text!r} lists {len(stages)} virtual stages, PP {pp} x "
                          f"chunks {chunks} = {pp * chunks}; accepted: one stage per virtual "
                          "stage", "pipeline_split")
    flat = "".join(stages)
    counts = {char: flat.count(char) for char in MODULES}
    wanted = {"E": 1, "L": 1, "t": layers, "m": mtp}
    wrong = [f"{counts[c]} {MODULES[c]} (the model has {wanted[c]})" for c in MODULES
             if counts[c] != wanted[c]]
    if wrong:
        raise _refuse(text, "it places " + ", ".join(wrong))
    if not stages[0].startswith("E"):
        raise _refuse(text, "the embedding must open the first virtual stage "
                      "(Megatron-Core: the first module; dlsched prices it on stage 0)")
    if not stages[-1].endswith("L"):
        raise _refuse(text, "the loss must close the last virtual stage")
    if mtp and stages[-1].count("m") != mtp:
        raise _refuse(text, "the MTP modules must sit with the loss on the last virtual stage "
                      "(Megatron-Core's standalone MTP stage is not priced)")
    if "t" in flat[flat.find("m"):] and mtp:
        raise _refuse(text, "a decoder layer follows an MTP module")
    spans, first = [], 0
    for stage in stages:
        count = stage.count("t")
        spans.append(range(first, first + count))
        first += count
    return tuple(spans)
