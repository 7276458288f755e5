"""Small torch models to profile and train (no downloads): a ResNet-style CNN and a GPT-style
decoder. Parameters are registered in the order the forward uses them, so ``named_parameters()``
order is forward order, as dlsched's layer model assumes.

Factories take sizes as keyword arguments; ``example_input(name, batch_size)`` builds a batch.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.nn import functional

from dlsched.errors import ConfigError


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a residual connection (ResNet's basic block);
    a 1x1 strided projection on the shortcut when the shape changes."""

    def __init__(self, channels_in: int, channels_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels_in, channels_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels_out)
        self.conv2 = nn.Conv2d(channels_out, channels_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or channels_in != channels_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(channels_in, channels_out, 1, stride, bias=False),
                nn.BatchNorm2d(channels_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = functional.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return functional.relu(out + self.shortcut(x))


class ResNetCNN(nn.Module):
    """A CIFAR-style ResNet: stem, one stage of ``blocks`` basic blocks per width (each stage
    after the first halves the resolution), global average pooling, a linear classifier."""

    def __init__(self, widths: tuple[int, ...] = (32, 64, 128, 256), blocks: int = 1,
                 num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        self.stem_bn = nn.BatchNorm2d(widths[0])
        layers: list[nn.Module] = []
        channels = widths[0]
        for index, width in enumerate(widths):
            for block in range(blocks):
                stride = 2 if index > 0 and block == 0 else 1
                layers.append(BasicBlock(channels, width, stride))
                channels = width
        self.stages = nn.Sequential(*layers)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = functional.relu(self.stem_bn(self.stem(x)))
        out = self.stages(out)
        return self.fc(torch.flatten(functional.adaptive_avg_pool2d(out, 1), 1))


class DecoderBlock(nn.Module):
    """Pre-norm transformer decoder block: causal multi-head self-attention and a 4x MLP."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=2)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        attn = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(batch, length, width))
        return x + self.out(functional.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """A GPT-2-style decoder: token and position embeddings, ``depth`` decoder blocks, a final
    layer norm and a language-model head tied to the token embedding."""

    def __init__(self, vocab: int = 2048, width: int = 256, depth: int = 4, heads: int = 4,
                 context: int = 64) -> None:
        super().__init__()
        if width % heads:
            raise ConfigError(f"width: must be a multiple of heads={heads} (got {width})")
        self.vocab, self.context = vocab, context
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.Sequential(*(DecoderBlock(width, heads) for _ in range(depth)))
        self.ln_f = nn.LayerNorm(width)
        for name, parameter in self.named_parameters():
            if name.endswith("out.weight") or name.endswith("proj.weight"):
                nn.init.normal_(parameter, std=0.02 / math.sqrt(2 * depth))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.blocks(self.wte(tokens) + self.wpe(positions))
        return functional.linear(self.ln_f(x), self.wte.weight)


def resnet_cnn(**sizes: Any) -> nn.Module:
    """The ResNet-style CNN (default: widths 32-256, one block each, about 1.2 M parameters)."""
    return ResNetCNN(**sizes)


def gpt(**sizes: Any) -> nn.Module:
    """The GPT-style decoder (default: 4 blocks of width 256, vocab 2048: about 3.7 M)."""
    return GPT(**sizes)


MODELS = {"resnet": resnet_cnn, "gpt": gpt}


def example_input(module: nn.Module, batch_size: int, image_size: int = 32,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """A random batch the module accepts: images for the CNN, token ids for the GPT."""
    if isinstance(module, GPT):
        return torch.randint(0, module.vocab, (batch_size, module.context), generator=generator)
    return torch.randn(batch_size, 3, image_size, image_size, generator=generator)


def user_factory(factory: Any, spec: str, kind: type, field: str, *args: Any,
                 **kwargs: Any) -> Any:
    """``factory(*args, **kwargs)`` of a user's ``package.module:function`` named ``spec``;
    ConfigError naming ``field`` when it is not a function, raises, or returns no ``kind``."""
    accepted = f"accepted: a function returning a {kind.__module__}.{kind.__qualname__}"
    if not callable(factory):
        raise ConfigError(f"{field}: {spec!r} is a {type(factory).__name__}; {accepted}")
    try:
        built = factory(*args, **kwargs)
    except Exception as error:
        message = (str(error).strip().splitlines() or [""])[0]
        raise ConfigError(f"{field}: calling {spec!r} failed with {type(error).__name__}: "
                          f"{message}; {accepted}") from None
    if not isinstance(built, kind):
        raise ConfigError(f"{field}: {spec!r} returned a {type(built).__name__}; {accepted}")
    return built
