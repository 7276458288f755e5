"""A lower bound on the iteration time of any schedule on a serial network.

Layer k's gradient is ready at r_k and the gradients of layers below k appear only later, so
all of layers 0..k (S_k = M_0 + ... + M_k bytes) are sent after r_k. The lowest of them with a
gradient, j, is ready only at r_j >= r_k, so either every byte of S_k goes in messages starting
at r_j or later, or some message starts earlier and S_k needs at least two messages:

    R_k = min(r_j + lower(S_k, 1), r_k + lower(S_k, 2)) >= r_k + lower(S_k, 1),

where ``lower(x, n)`` bounds n messages carrying x bytes (n a + b x for alpha-beta). With
C_l = max over k <= l of R_k, the earliest time layers 0..l can all be reduced, the forward of
layer l starts no earlier than C_l nor before the forwards below it, and the first forward not
before the end of backward: f_0 = max(T_b, C_0), f_l = max(f_{l-1} + t_f[l-1], C_l),
LB = f_{L-1} + t_f[L-1]. (The US-Byte reference uses r_k + a + b S_k; the two-message case
makes the bound tighter where startups are large.) On a network carrying k > 1 messages at
once, ``lower(x, n, k)`` counts one latency only (concurrent messages overlap them), so the
two-message case adds nothing there.
"""

from __future__ import annotations

from dlsched.dataparallel.problem import DPProblem


def lower_bound(problem: DPProblem) -> float:
    """The bound above, seconds from the start of backward to the end of the next forward."""
    prefix, reduced_by = 0, 0.0
    first_ready: float | None = None
    clock = problem.backward_end
    for layer in range(problem.num_layers):
        prefix += problem.grad_bytes[layer]
        if prefix > 0:
            if first_ready is None:
                first_ready = problem.ready[layer]
            late = first_ready + problem.comm.lower(prefix, 1, problem.in_flight)
            split = problem.ready[layer] + problem.comm.lower(prefix, 2, problem.in_flight)
            reduced_by = max(reduced_by, min(late, split))
        clock = max(clock, reduced_by)
        clock += problem.forward[layer]
    return clock
