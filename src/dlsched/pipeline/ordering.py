"""Device ordering by recursive bisection of the device graph along its weakest cuts.

Consecutive stages of a pipeline exchange activations every microbatch, so the planner assigns
stages to contiguous runs of an ordering in which neighbours are well connected. The ordering
splits the GPUs in two along the sparsest cut (ratio cut: cut bandwidth / (|A| |B|)) found by a
sweep over the Fiedler vector of the bandwidth-weighted Laplacian, and recurses into both
halves. A part whose links are all equal keeps the input order. Cost: one symmetric
eigendecomposition per part, O(n^3) at the top level, O(n^3 log n) in all.
"""

from __future__ import annotations

import numpy as np

from dlsched.hardware.device_graph import DeviceGraph


def device_order(graph: DeviceGraph) -> list[int]:
    """GPU indices ordered so that the weakest cuts fall between the largest groups."""
    weights = (graph.bandwidth + graph.bandwidth.T) / 2.0
    np.fill_diagonal(weights, 0.0)
    return _bisect(weights, list(range(graph.num_devices)))


def _bisect(weights: np.ndarray, nodes: list[int]) -> list[int]:
    if len(nodes) <= 2:
        return nodes
    sub = weights[np.ix_(nodes, nodes)]
    off = sub[~np.eye(len(nodes), dtype=bool)]
    if np.allclose(off, off[0], rtol=1e-9):
        return nodes
    split = _sparsest_cut(sub)
    left = [nodes[i] for i in sorted(split)]
    right = [nodes[i] for i in range(len(nodes)) if i not in split]
    return _bisect(weights, left) + _bisect(weights, right)


def _sparsest_cut(sub: np.ndarray) -> set[int]:
    """Local indices of one side of the best ratio cut along the Fiedler ordering."""
    n = len(sub)
    scale = sub.max()
    laplacian = np.diag(sub.sum(axis=1)) - sub
    _, vectors = np.linalg.eigh(laplacian / scale)
    fiedler = np.round(vectors[:, 1], 9)
    if fiedler[0] > 0:
        fiedler = -fiedler
    sweep = sorted(range(n), key=lambda i: (fiedler[i], i))
    inside = np.zeros(n, dtype=bool)
    cut, best, best_k = 0.0, np.inf, 1
    for k, node in enumerate(sweep[:-1], start=1):
        cut += sub[node, ~inside].sum() - sub[node, node] - sub[node, inside].sum()
        inside[node] = True
        ratio = cut / (k * (n - k))
        if ratio < best * (1 - 1e-9):
            best, best_k = ratio, k
    return set(sweep[:best_k])
