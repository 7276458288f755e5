"""Equal tuning budget and the cap on US-Byte's gain over WFBP."""

from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.dataparallel import AlphaBeta, DPProblem, run_dataparallel
from dlsched.dataparallel.plan import DPPlan
from dlsched.dataparallel.policies import TUNED_DEFAULTS
from dlsched.dataparallel.policies.bytescheduler import bytescheduler_schedule
from dlsched.dataparallel.tuning import (
    CREDITS,
    DEFAULT_CREDIT_MULTIPLE,
    DEFAULT_PARTITION,
    SIZES,
    credit_bytes,
    credit_search,
)
from dlsched.experiments.usbyte import cap

MS = 1e-3
MiB = 2**20



def _problems(slots: st.SearchStrategy[int]) -> st.SearchStrategy[DPProblem]:
    return st.builds(
        lambda layers, alpha, beta, k: DPProblem(
            tuple(f * MS for f, _, _ in layers), tuple(b * MS for _, b, _ in layers),
            tuple(g * MiB for _, _, g in layers), AlphaBeta(alpha * MS, beta), in_flight=k),
        st.lists(st.tuples(st.floats(0.05, 8), st.floats(0.05, 8), st.integers(1, 24)),
                 min_size=1, max_size=6),
        st.floats(0.01, 3), st.sampled_from([1e-11, 6e-11, 3e-10, 1e-9]), slots)


problems = _problems(st.integers(1, 3))


@settings(max_examples=25, deadline=None)
@given(problem=problems)
def test_tuned_variant_never_slower_than_its_default(problem):
    """The default knobs are in every tuned search, which keeps the fastest plan."""
    for tuned, default in TUNED_DEFAULTS.items():
        assert (run_dataparallel(problem, tuned).time_s
                <= run_dataparallel(problem, default).time_s * (1 + 1e-12)), tuned


@settings(max_examples=40, deadline=None)
@given(problem=_problems(st.just(1)))
def test_usbyte_over_wfbp_never_exceeds_the_cap(problem):
    """On a serial network both send >= 1 message per tensor one at a time, so WFBP's network
    ends no later than US-Byte's, and WFBP / US-Byte <= 1 + T_f / (T_b + T_f). (On a K-slot
    network US-Byte may run several at once under its credit, and the cap need not hold.)"""
    limit = cap(sum(problem.forward), problem.backward_end)
    wfbp = run_dataparallel(problem, "wfbp").time_s
    for name in ("usbyte", "usbyte-tuned"):
        assert wfbp / run_dataparallel(problem, name).time_s <= limit * (1 + 1e-9), name


def test_cap_formula():
    """Backward = 2 x forward gives 4/3."""
    assert abs(cap(1.0, 2.0) - 4 / 3) < 1e-12


def test_credit_search_plans_the_shipped_default_first_then_the_grid():
    """ByteScheduler's core: the default partition and credit, then every credit (and, tuned,
    every size of ``SIZES``), the plan named by the policy."""
    problem = DPProblem((MS, MS), (MS, MS), (4 * MiB, 8 * MiB), AlphaBeta(0.1 * MS, 1e-10),
                        in_flight=2)
    tried: list[tuple[int, int]] = []

    def build(problem: DPProblem, unit: int, credit_multiple: int) -> DPPlan:
        tried.append((unit, credit_multiple))
        return bytescheduler_schedule(problem, unit, credit_bytes(credit_multiple, unit))

    assert credit_search(problem, build, "unit", "probe", tune_size=False).policy == "probe"
    assert tried == [(DEFAULT_PARTITION, DEFAULT_CREDIT_MULTIPLE),
                     *((DEFAULT_PARTITION, c) for c in CREDITS if c != DEFAULT_CREDIT_MULTIPLE)]
    tried.clear()
    credit_search(problem, build, "unit", "probe", tune_size=True, credits=(2,))
    assert tried == [(DEFAULT_PARTITION, DEFAULT_CREDIT_MULTIPLE), (DEFAULT_PARTITION, 2),
                     *((size, 2) for size in SIZES)]
