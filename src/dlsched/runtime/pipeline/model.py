"""Models the pipeline runtime trains: a chain of blocks, a batch maker and a loss.

A ``PipelineModel`` is an ``nn.Sequential`` of named blocks (each takes and returns one tensor,
so any contiguous range of blocks is a stage module), ``make_batch(samples, seed)`` giving
(inputs, targets) and ``loss_fn(output, targets)`` (a mean over the samples, so the mean of the
microbatches' losses is the whole batch's). Built-in: small GPT-style decoders defined here
(token and position embedding, the pre-LayerNorm causal self-attention + MLP
``DecoderBlock`` of ``runtime.models``, a LayerNorm + linear head not tied to the embedding, so
every block is its own stage-able module; no dropout, so runs are deterministic), by preset
name. A user's model is ``"package.module:function"``, a function ``(seed) -> PipelineModel``.
"""

from __future__ import annotations

import importlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as functional
from torch import Tensor, nn

from dlsched.errors import ConfigError
from dlsched.runtime.models import DecoderBlock, user_factory


@dataclass(frozen=True)
class PipelineModel:
    """Blocks in forward order, ``make_batch(samples, seed) -> (inputs, targets)``, the loss."""

    name: str
    blocks: nn.Sequential
    make_batch: Callable[[int, int], tuple[Tensor, Tensor]]
    loss_fn: Callable[[Tensor, Tensor], Tensor]

    @property
    def block_names(self) -> tuple[str, ...]:
        """Names of the blocks, in order."""
        return tuple(name for name, _ in self.blocks.named_children())


@dataclass(frozen=True)
class GptConfig:
    """A GPT-style decoder: vocabulary, sequence length (tokens), hidden size, heads, layers."""

    vocab: int
    sequence: int
    hidden: int
    heads: int
    layers: int


GPT_PRESETS = {
    "gpt-tiny": GptConfig(vocab=64, sequence=16, hidden=32, heads=2, layers=4),
    "gpt-small": GptConfig(vocab=256, sequence=32, hidden=128, heads=4, layers=8),
}


class Embedding(nn.Module):
    """Token plus learned position embedding: (samples, tokens) ids -> (samples, tokens, h)."""

    def __init__(self, config: GptConfig) -> None:
        super().__init__()
        self.token = nn.Embedding(config.vocab, config.hidden)
        self.position = nn.Parameter(torch.randn(config.sequence, config.hidden) * 0.02)

    def forward(self, ids: Tensor) -> Tensor:
        """Embedded tokens."""
        return self.token(ids) + self.position[: ids.shape[1]]


class Head(nn.Module):
    """Final LayerNorm and the vocabulary projection: (samples, tokens, h) -> logits."""

    def __init__(self, config: GptConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(config.hidden)
        self.out = nn.Linear(config.hidden, config.vocab, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        """Logits (samples, tokens, vocab)."""
        return self.out(self.norm(x))


def next_token_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy of the next-token prediction over every token of the batch."""
    return functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def gpt_model(name: str, config: GptConfig, seed: int = 0) -> PipelineModel:
    """A GPT-style decoder with weights drawn from ``seed`` (same seed, same weights)."""
    torch.manual_seed(seed)
    blocks = [("embed", Embedding(config))]
    blocks += [(f"layer{i}", DecoderBlock(config.hidden, config.heads))
               for i in range(config.layers)]
    blocks.append(("head", Head(config)))

    def make_batch(samples: int, batch_seed: int) -> tuple[Tensor, Tensor]:
        generator = torch.Generator().manual_seed(batch_seed)
        tokens = torch.randint(0, config.vocab, (samples, config.sequence + 1),
                               generator=generator)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    return PipelineModel(name, nn.Sequential(OrderedDict(blocks)), make_batch, next_token_loss)


def model_names() -> list[str]:
    """The built-in model names."""
    return list(GPT_PRESETS)


def load_model(spec: str, seed: int = 0) -> PipelineModel:
    """A built-in model by name or ``"package.module:function"`` called as ``function(seed)``;
    ConfigError naming the accepted forms otherwise."""
    if spec in GPT_PRESETS:
        return gpt_model(spec, GPT_PRESETS[spec], seed)
    module_name, _, function_name = spec.partition(":")
    if not module_name or not function_name:
        raise ConfigError(f"model: {spec!r} is neither a built-in model ("
                          + ", ".join(GPT_PRESETS) + ") nor 'package.module:function'")
    try:
        factory = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"model: cannot load {spec!r}: {error}") from None
    return user_factory(factory, spec, PipelineModel, "model", seed)
