"""What of a chain a pipeline simulation reads: the part of the key its results are kept by
(``simulate._KEPT``)."""

from __future__ import annotations

from weakref import WeakKeyDictionary

from dlsched.pipeline.chains.chain import Chain

_NUMBERS: WeakKeyDictionary[Chain, tuple] = WeakKeyDictionary()


def chain_numbers(chain: Chain) -> tuple:
    """Everything of ``chain`` a simulation and its memory check read: per-block FLOP, bytes
    sent, gradient bytes, stash, recomputation transients and workspace, the seconds an
    overlapped pair hides, the backward
    shares, static-state factor, samples and memory reserve (not its name or mode label)."""
    numbers = _NUMBERS.get(chain)
    if numbers is None:
        arrays = (chain.forward_flops, chain.backward_flops, chain.activation_bytes,
                  chain.param_bytes, chain.stash_bytes, chain.transient_bytes,
                  chain.workspace_bytes, chain.overlap_seconds)
        numbers = (*(array.tobytes() for array in arrays), chain.grad_shares,
                   chain.state_factor, chain.samples, chain.reserve_bytes, chain.fragmentation)
        _NUMBERS[chain] = numbers
    return numbers
