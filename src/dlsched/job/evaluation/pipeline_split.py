"""Which transformer layers each virtual pipeline stage holds: Megatron-Core's pipeline split.

Megatron-Core places the ``layers`` of a GPT on ``pp x chunks`` virtual stages in order (virtual
stage ``c x pp + r`` is chunk ``c`` of pipeline rank ``r``, Megatron-LM's interleaving) and
builds ``get_num_layers_to_build`` layers on each (``megatron/core/transformer/
transformer_block.py`` of NVIDIA/Megatron-LM at d98e8a64ddf34856e74b24714e3bedb2f5a39553, the
same rule at ee6737da824b18f945946b4c798adf2328374cb7, the Megatron-Core NeMo 25.02 runs).
``Execution.pipeline_split`` names which of its rules a plan uses:

* ``even``: ``layers / (pp x chunks)`` on every stage (both options below off, the default);
* ``account-embedding`` (``--account-for-embedding-in-pipeline-split``): the input embedding
  counts as one layer in the split, ``(layers + 1) / (pp x chunks)`` per stage, and the first
  virtual stage builds one layer fewer beside the embedding;
* ``account-loss`` (``--account-for-loss-in-pipeline-split``): the output layer and loss count
  as one layer, the last virtual stage builds one fewer beside them;
* ``account-embedding-loss``: both, ``(layers + 2) / (pp x chunks)`` per stage. NeMo's
  ``llama31_405b`` recipe sets both (``trainer()``'s defaults
  ``account_for_embedding_in_pipeline_split=True`` and ``account_for_loss_in_pipeline_split=
  True``, ``nemo/collections/llm/recipes/llama31_405b.py`` lines 72-73 at NVIDIA/NeMo
  d2b21556f2455b52ad7217f334bb66eaa13c0f83): Llama 3.1 405B's 126 layers over PP 8 x VP 8 are
  128 = 64 x 2 slots, the first virtual stage the embedding and 1 layer, the last 1 layer and
  the head, the 62 others 2 layers each.

Megatron-Core requires the counted layers to divide into ``pp`` ranks and each rank's into
``chunks`` (``TransformerConfig.__post_init__``): ``(layers + accounted) % (pp x chunks) == 0``,
checked here with a ConfigError naming the splits that would work (at ee6737d, without
interleaving, the config check also wanted the layers to divide into the ranks left beside
accounted ones, a check d98e8a64 replaced by this one). A stage may then hold no
layer at all (the embedding alone: Megatron asserts only ``>= 0``). Megatron-Core's other uneven
options are not expressed: ``--decoder-first/last-pipeline-num-layers`` fix whole ranks' layers
(each a multiple of ``chunks``, the middle ranks sharing the rest equally: 126 layers over PP 8 x
VP 8 has no such split), and ``--pipeline-model-parallel-layout`` lists every stage's modules by
hand (``layout:<string>``, ``job.evaluation.pipeline_layout``: the placement read from the
string, for runs that set one); the accounting options are the ones that follow from the model
and the degrees alone.
TorchTitan without split points (``generate_split_points``, torchtitan 9dec370) gives the first
stage ``layers // stages`` layers, one of the ``layers % stages`` left over to each next stage,
the last stage the rest: where ``(layers + 2) % stages == 0`` (Llama 3.1 405B's 126 over 8 or 16
stages) that is ``account-embedding-loss``'s placement, its embedding and head on the same
stages (the 405B TorchTitan ledger rows).

Multi-token-prediction modules (``Model.mtp_layers``, ``job.compute.mtp``) sit on the
last virtual stage beside the output layer; when the loss is accounted each counts as one layer
there too (``mtp``), as Megatron-Core's layout for DeepSeek-V3 places them (its MoE recipes'
``--pipeline-model-parallel-layout "Et|(tt|)*30mL"``: the embedding and one layer, 30 stages of
two layers, then the MTP module and the loss: 61 layers + 3 = 64 = 32 x 2 slots); over DualPipe's
16 stages the same 64 slots give 4 per stage.
"""

from __future__ import annotations

from contextlib import suppress
from functools import lru_cache

from dlsched.errors import ConfigError, check_choice
from dlsched.job.evaluation.pipeline_layout import layout_of, layout_spans, parse_layout

SPLITS = ("even", "account-embedding", "account-loss", "account-embedding-loss")
# (embedding, loss) counted as a layer in the split: Megatron-Core's two options
ACCOUNTED = {"even": (0, 0), "account-embedding": (1, 0), "account-loss": (0, 1),
             "account-embedding-loss": (1, 1)}


def check_split(split: str) -> None:
    """ConfigError unless ``split`` is one of ``SPLITS`` or ``layout:`` with a Megatron-Core
    layout string (``job.evaluation.pipeline_layout``)."""
    if layout_of(split):
        parse_layout(layout_of(split))
    else:
        check_choice("pipeline_split", split, (*SPLITS, "layout:<Megatron-Core layout>"))


def slots_per_stage(layers: int, pp: int, chunks: int, split: str, mtp: int = 0) -> int:
    """Layers per virtual stage counting the accounted embedding and loss as one each (and
    with the loss the ``mtp`` MTP modules): Megatron-LM's
    ``--num-layers-per-virtual-pipeline-stage`` for the split (module docstring); ConfigError
    when they do not divide, or for a layout (its stages' own counts: ``stage_layers``)."""
    check_split(split)
    if layout_of(split):
        raise ConfigError("a layout lists each virtual stage's layers; accepted here: "
                          + ", ".join(SPLITS), "pipeline_split")
    embedding, loss = ACCOUNTED[split]
    stages = pp * chunks
    slots = layers + embedding + loss * (1 + mtp)
    if slots % stages:
        counted = "".join(f" + the {part}" for part, on in (("embedding", embedding),
                                                             ("loss", loss),
                                                             (f"{mtp} MTP", loss * mtp)) if on)
        others = [s for s in feasible_splits(layers, pp, chunks, mtp=mtp) if s != split]
        accepted = (f"--pipeline-split {' or '.join(others)} for these degrees, or "
                    if others else "")
        raise ConfigError(f"{layers} layers{counted} do not split into PP x chunks = "
                          f"{stages} equal virtual stages (--pipeline-split {split}); accepted: "
                          f"{accepted}pp x chunks dividing {slots}", "pp")
    return slots // stages


@lru_cache(maxsize=4096)
def stage_layers(layers: int, pp: int, chunks: int, split: str,
                 mtp: int = 0) -> tuple[range, ...]:
    """The layer indices of each virtual stage, in stage order (module docstring; ``mtp``
    MTP modules beside the loss); ConfigError when the split is impossible."""
    if layout_of(split):
        return layout_spans(layout_of(split), layers, pp, chunks, mtp)
    per = slots_per_stage(layers, pp, chunks, split, mtp)
    embedding, loss = ACCOUNTED[split]
    counts = [per] * (pp * chunks)
    counts[0] -= embedding
    counts[-1] -= loss * (1 + mtp)
    if counts[-1] < 0:
        raise ConfigError(f"the last of {pp * chunks} virtual stages of {per} layers "
                          f"cannot hold the loss and {mtp} MTP modules; accepted: fewer "
                          "virtual stages", "pp")
    spans, first = [], 0
    for count in counts:
        spans.append(range(first, first + count))
        first += count
    return tuple(spans)


def rank_layers(layers: int, pp: int, chunks: int, split: str, rank: int,
                mtp: int = 0) -> int:
    """Layers pipeline rank ``rank`` holds over all its chunks."""
    spans = stage_layers(layers, pp, chunks, split, mtp)
    return sum(len(spans[chunk * pp + rank]) for chunk in range(chunks))


def feasible_splits(layers: int, pp: int, chunks: int,
                    among: tuple[str, ...] = SPLITS, mtp: int = 0) -> tuple[str, ...]:
    """The splits of ``among`` Megatron-Core accepts for ``layers`` over ``pp x chunks``
    stages (a layout: where it lists that many), in their order, each placing the layers
    differently (of two that place them alike, e.g. the even and the accounted split at ``pp x
    chunks`` <= 2, the first is kept)."""
    found: dict[tuple[range, ...], str] = {}
    for split in among:
        if layout_of(split):  # a layout fits the stages it lists, or none
            with suppress(ConfigError):
                found.setdefault(layout_spans(layout_of(split), layers, pp, chunks, mtp), split)
            continue
        embedding, loss = ACCOUNTED[split]
        slots = layers + embedding + loss * (1 + mtp)
        if slots % (pp * chunks) == 0 and slots // (pp * chunks) >= loss * (1 + mtp):
            found.setdefault(stage_layers(layers, pp, chunks, split, mtp), split)
    return tuple(found.values())
