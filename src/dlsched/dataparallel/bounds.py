"""A lower bound on the iteration time of any schedule on a serial network.

Layer k's gradient is ready at r_k and the gradients of layers below k appear only later, so
all of layers 0..k (M_0 + ... + M_k bytes) must still be sent after r_k:
C_l = max over k <= l of (r_k + lower(M_0 + ... + M_k)) is the earliest time layers 0..l can
all be reduced (``lower`` is the comm model's bound for any split into messages: a + b x for
alpha-beta). The forward of layer l cannot start before C_l nor before the forwards below it,
and the first forward not before the end of backward:
f_0 = max(T_b, C_0), f_l = max(f_{l-1} + t_f[l-1], C_l), LB = f_{L-1} + t_f[L-1].
"""

from __future__ import annotations

from dlsched.dataparallel.problem import DPProblem


def lower_bound(problem: DPProblem) -> float:
    """The bound above, seconds from the start of backward to the end of the next forward."""
    prefix, reduced_by = 0, 0.0
    clock = problem.backward_end
    for layer in range(problem.num_layers):
        prefix += problem.grad_bytes[layer]
        if prefix > 0:
            reduced_by = max(reduced_by, problem.ready[layer] + problem.comm.lower(prefix))
        clock = max(clock, reduced_by)
        clock += problem.forward[layer]
    return clock
