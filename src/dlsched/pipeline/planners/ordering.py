"""Device ordering by recursive bisection of the device graph along its weakest cuts.

Consecutive stages of a pipeline exchange activations every microbatch, so the planner assigns
stages to contiguous runs of an ordering in which neighbours are well connected. The ordering
splits the GPUs in two along the sparsest cut (ratio cut: cut bandwidth / (|A| |B|)) found by a
sweep over the Fiedler vector of the bandwidth-weighted Laplacian, and recurses into both
halves. GPUs joined by a part's strongest links (an NVLink island, a server) are kept together:
the cut is searched on the graph of those islands. A part whose links are all equal keeps the
input order. Cost: one symmetric eigendecomposition per part on its islands, at most O(n^3)
at the top level and O(n^3 log n) in all; O(s^3) for s servers on server graphs.
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

import numpy as np

from dlsched.hardware.device_graph import DeviceGraph


def device_order(graph: DeviceGraph) -> list[int]:
    """GPU indices ordered so that the weakest cuts fall between the largest groups
    (computed once per graph: the planner asks for every recomputation mode)."""
    if graph not in _ORDERS:
        weights = (graph.bandwidth + graph.bandwidth.T) / 2.0
        np.fill_diagonal(weights, 0.0)
        _ORDERS[graph] = tuple(_bisect(weights, list(range(graph.num_devices))))
    return list(_ORDERS[graph])


_ORDERS: WeakKeyDictionary[DeviceGraph, tuple[int, ...]] = WeakKeyDictionary()


def _bisect(weights: np.ndarray, nodes: list[int]) -> list[int]:
    if len(nodes) <= 2:
        return nodes
    sub = weights[np.ix_(nodes, nodes)]
    off = sub[~np.eye(len(nodes), dtype=bool)]
    if np.allclose(off, off[0], rtol=1e-9):
        return nodes
    split = _split(sub)
    left = [nodes[i] for i in sorted(split)]
    right = [nodes[i] for i in range(len(nodes)) if i not in split]
    return _bisect(weights, left) + _bisect(weights, right)


def _split(sub: np.ndarray) -> set[int]:
    """One side of the cut. GPUs joined by the part's strongest links (its islands) are
    never separated: the cut is searched on the graph of islands (summed bandwidth between
    them), which is also what keeps large graphs fast; islands joined by equal links are
    halved in index order."""
    strongest = sub >= sub.max() * (1 - 1e-9)
    np.fill_diagonal(strongest, False)
    from scipy.sparse.csgraph import connected_components

    count, label = connected_components(strongest, directed=False)
    if count in (1, len(sub)):
        return _sparsest_cut(sub, np.ones(len(sub)))
    member = np.eye(count)[label]
    sizes = member.sum(axis=0)
    quotient = member.T @ sub @ member
    np.fill_diagonal(quotient, 0.0)
    per_link = quotient / np.outer(sizes, sizes)
    off = per_link[~np.eye(count, dtype=bool)]
    if np.allclose(off, off[0], rtol=1e-9):
        side = set(range(count // 2))
    else:
        side = _sparsest_cut(quotient, sizes)
    return {i for i in range(len(sub)) if label[i] in side}


def _sparsest_cut(sub: np.ndarray, sizes: np.ndarray) -> set[int]:
    """Indices of one side of the best ratio cut (cut / (size A x size B)) along the
    Fiedler vector of ``L x = lambda S x`` (Laplacian ``L`` of ``sub``, ``S`` the node
    sizes: the relaxation of the size-weighted ratio cut)."""
    n = len(sub)
    laplacian = np.diag(sub.sum(axis=1)) - sub
    scale = 1.0 / np.sqrt(sizes)
    _, vectors = np.linalg.eigh(laplacian * np.outer(scale, scale) / sub.max())
    fiedler = np.round(vectors[:, 1] * scale, 9)
    if fiedler[0] > 0:
        fiedler = -fiedler
    sweep = sorted(range(n), key=lambda i: (fiedler[i], i))
    inside = np.zeros(n, dtype=bool)
    total, size, cut, best, best_k = sizes.sum(), 0.0, 0.0, np.inf, 1
    for k, node in enumerate(sweep[:-1], start=1):
        cut += sub[node, ~inside].sum() - sub[node, node] - sub[node, inside].sum()
        inside[node] = True
        size += sizes[node]
        ratio = cut / (size * (total - size))
        if ratio < best * (1 - 1e-9):
            best, best_k = ratio, k
    return set(sweep[:best_k])
