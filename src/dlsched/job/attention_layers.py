"""Which keys each layer's queries attend: full causal, sliding-window or chunked attention,
per layer pattern (``Model.attention_pattern`` and ``attention_window``).

A pattern is a string of one letter per layer, repeated over the depth (layer ``i`` has kind
``pattern[i % len(pattern)]``): ``F`` full causal attention, ``S`` a causal sliding window of
``w = attention_window`` tokens, ``C`` chunked attention (the sequence cut into chunks of ``w``
tokens, causal inside each, nothing across). The released configs:

* GPT-OSS (OpenAI's config.json of openai/gpt-oss-20b and -120b: ``layer_types`` alternating
  ``sliding_attention``, ``full_attention`` from layer 0, ``sliding_window`` 128): ``SF``, 128.
  Hugging Face's mask lets query ``i`` see keys ``j`` with ``i - w < j <= i``: ``w`` keys
  with itself.
* Llama 4 Scout and Maverick (Meta's config.json ``text_config``: ``attention_chunk_size``
  8192, ``no_rope_layers`` defaulting to ``(i + 1) % 4 != 0``, the RoPE layers chunked and
  every fourth layer global and without positions, NoPE): ``CCCF``, 8192. NoPE changes no
  cost dlsched prices (rotary embeddings are not priced as an op of their own).

**Pairs a layer computes.** Query ``i`` (``0 .. s - 1``) attends ``min(i + 1, w)`` keys in a
sliding window, ``i mod w + 1`` in a chunk, ``i + 1`` under a full causal mask. Over ``s``
tokens (``causal_pairs``, ``sliding_pairs``, ``chunked_pairs``):

    full      s (s + 1) / 2
    sliding   s (s + 1) / 2 if s <= w, else s w - w (w - 1) / 2
    chunked   q c (c + 1) / 2 + r (r + 1) / 2 with q = s // c, r = s mod c (c = w)

**What a flash kernel executes** (``executed_pairs``): FlashAttention-2 tiles the score matrix
in blocks of ``B x B`` (``models.kernels.ATTENTION_BLOCK``: 128 queries by 128 keys) and skips
a tile all of whose entries are masked, computing the others whole (Dao, *FlashAttention-2*,
2023, §3.1 "causal masking": blocks entirely masked are skipped, blocks on the diagonal
computed with the mask applied). For a query block ``[q0, q1]`` the keys any of its queries
may see form one interval ``[lo, q1]`` (``lo = 0`` full, ``max(0, q0 - w + 1)`` sliding, the
start of ``q0``'s chunk chunked: consecutive queries' intervals overlap or touch), so the
kernel computes the key blocks from ``lo // B`` to ``q1 // B``. With ``w = 128`` a query
block computes two tiles where it needs about one: the sliding layer executes about
``2 s B`` pairs for its ``s w`` useful ones. ``window_ratio`` is a layer's executed pairs
over a full causal layer's, the factor its attention-core FLOP take (``job.compute.
attention_window`` prices it).

**Model FLOP** (MFU's numerator, ``mfu_keys``): dlsched counts the attention core as
Megatron-LM (Narayanan et al., SC 2021, Eq. 3) and PaLM (Chowdhery et al. 2022, App. B:
``6 N + 12 L H Q T``) do, the causal triangle not discounted: ``4 a`` FLOP per query per key
of the span its mask admits, ``s`` keys in a full layer; the same convention gives a sliding
layer ``min(w, s)`` and a chunked layer ``min(w, s)`` keys per query (the window or the chunk,
its own causal triangle again not discounted).
"""

from __future__ import annotations

from functools import lru_cache

from dlsched.errors import ConfigError

KINDS = {"F": "full", "S": "sliding", "C": "chunked"}
FLASH_BLOCK = 128  # FlashAttention-2's query and key block (models.kernels.ATTENTION_BLOCK)


def check_pattern(pattern: str, window: int) -> None:
    """ConfigError naming the field when ``pattern`` / ``window`` are not accepted."""
    bad = sorted(set(pattern) - set(KINDS))
    if bad:
        raise ConfigError(f"model: attention_pattern {pattern!r} has {''.join(bad)!r}; "
                          "accepted letters: F (full), S (sliding window), C (chunked)")
    windowed = any(kind != "F" for kind in pattern)
    if window < 0 or (windowed and window < 1):
        raise ConfigError(f"model: attention_window must be >= 1 tokens with an S or C "
                          f"layer in attention_pattern (got {window})")
    if window and not windowed:
        raise ConfigError(f"model: attention_window {window} needs S or C layers in "
                          f"attention_pattern (got {pattern!r})")


def layer_kind(pattern: str, index: int) -> str:
    """The attention kind of layer ``index`` (``F``, ``S`` or ``C``; ``F`` without a pattern)."""
    return pattern[index % len(pattern)] if pattern else "F"


@lru_cache(maxsize=1024)
def kind_counts(pattern: str, start: int, stop: int) -> dict[str, int]:
    """How many of layers ``start .. stop - 1`` are of each kind (``F``, ``S``, ``C``)."""
    counts = dict.fromkeys(KINDS, 0)
    if not pattern:
        counts["F"] = max(0, stop - start)
        return counts
    period = len(pattern)
    for offset, kind in enumerate(pattern):  # layers i with i % period == offset
        counts[kind] += -(-(stop - offset) // period) - -(-(start - offset) // period)
    return counts


def causal_pairs(s: int) -> int:
    """(query, key) pairs of a full causal layer over ``s`` tokens."""
    return s * (s + 1) // 2


def sliding_pairs(s: int, w: int) -> int:
    """Pairs of a causal sliding window of ``w`` keys (the query's own included)."""
    return causal_pairs(s) if s <= w else s * w - w * (w - 1) // 2


def chunked_pairs(s: int, c: int) -> int:
    """Pairs of chunked attention, chunks of ``c`` tokens, causal inside each."""
    whole, rest = divmod(s, c)
    return whole * causal_pairs(c) + causal_pairs(rest)


def useful_pairs(kind: str, s: int, w: int) -> int:
    """Pairs a layer of ``kind`` needs over ``s`` tokens (window or chunk ``w``)."""
    if kind == "S":
        return sliding_pairs(s, w)
    if kind == "C":
        return chunked_pairs(s, w)
    return causal_pairs(s)


@lru_cache(maxsize=1024)
def executed_pairs(kind: str, s: int, w: int, block: int = FLASH_BLOCK) -> int:
    """Pairs a flash kernel of ``block x block`` tiles computes over ``s`` tokens (module
    docstring: the tiles not wholly masked, each computed whole; the last partial)."""
    total = 0
    for q0 in range(0, s, block):
        q1 = min(q0 + block, s) - 1
        if kind == "S":
            lo = max(0, q0 - w + 1)
        elif kind == "C":
            lo = q0 - q0 % w
        else:
            lo = 0
        keys = min(s, (q1 // block + 1) * block) - (lo // block) * block
        total += (q1 - q0 + 1) * keys
    return total


def window_ratio(kind: str, s: int, w: int) -> float:
    """A layer's executed pairs over a full causal layer's (1 for ``F``)."""
    if kind == "F":
        return 1.0
    return executed_pairs(kind, s, w) / executed_pairs("F", s, w)


def mfu_keys(kind: str, s: int, w: int) -> int:
    """Keys per query a layer's attention core counts in the model FLOP (module docstring)."""
    return s if kind == "F" else min(w, s)
