"""Runtime pieces that need no process group: plan refusal, profiles, calibration fits."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("torch", reason="optional torch extra not installed")

from dlsched.dataparallel import POLICIES, PlanError
from dlsched.dataparallel.plan import Block, DPPlan, Message
from dlsched.runtime.dataparallel.calibrate import fit, network_document, write_network
from dlsched.runtime.dataparallel.executor import PlanExecutor, update_groups
from dlsched.runtime.dataparallel.profile import profile, write_profile
from dlsched.runtime.dataparallel.train import optimizer_factory, problem_from_profile
from dlsched.runtime.models import example_input, gpt, resnet_cnn


@pytest.fixture(scope="module")
def tiny() -> tuple:
    import torch

    torch.manual_seed(0)
    module = resnet_cnn(widths=(4, 8))
    return module, profile(module, example_input(module, 2), warmup=1, repeats=2,
                           optimizer=optimizer_factory("sgd", 0.0))


def test_profile_has_one_layer_per_parameter_in_order(tiny: tuple) -> None:
    """named_parameters() order, parameter counts, non-negative times, forward time only on
    each module's last parameter (weight of a BatchNorm: 0, its bias: the module's time)."""
    module, result = tiny
    named = list(module.named_parameters())
    assert [layer.name for layer in result.layers] == [n for n, _ in named]
    assert [layer.params for layer in result.layers] == [p.numel() for _, p in named]
    by_name = {layer.name: layer for layer in result.layers}
    assert by_name["stem_bn.weight"].forward_time_s == 0.0
    assert by_name["stem_bn.bias"].forward_time_s > 0.0
    assert sum(layer.backward_time_s for layer in result.layers) > 0


def test_update_groups_join_modules_whose_messages_have_arrived() -> None:
    """Modules needing 3, 1, 2, 3, 4, 2 messages: the first waits for 3, after which the next
    three need nothing more (one group); the fifth waits for a 4th and the sixth joins it."""
    assert update_groups([3, 1, 2, 3, 4, 2]) == [[0, 1, 2, 3], [4, 5]]
    assert update_groups([5, 5, 5]) == [[0, 1, 2]]
    assert update_groups([1, 2, 3]) == [[0], [1], [2]]
    assert update_groups([]) == []


def test_profile_update_shares_follow_parameter_counts() -> None:
    """One optimizer step over all parameters, split between the owning modules in
    proportion to their parameter counts: with a step that only sleeps 2 ms, Linear(4, 4)
    (20 parameters) gets twice the share of Linear(4, 2) (10), and the shares sum to at
    least the sleep."""
    import time

    import torch

    class Sleeper:
        def __init__(self, params: list) -> None:
            self.params = params

        def step(self) -> None:
            time.sleep(0.002)

    from dlsched.runtime.dataparallel.profile import _time_updates, parameter_owners
    from dlsched.runtime.recorder import Clock

    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    owners = parameter_owners(module)
    shares = _time_updates(owners, list(module.parameters()), Sleeper, Clock(), repeats=3)
    assert shares[0] == pytest.approx(2 * shares[1], rel=1e-12)
    assert shares.sum() >= 0.002


def test_profile_loads_in_dataparallel_cli(tiny: tuple, tmp_path, run_cli) -> None:
    """The profiler's CSV is accepted by ``dlsched dataparallel --profile``."""
    path = tmp_path / "tiny.csv"
    write_profile(tiny[1], path)
    code, out, err = run_cli("dataparallel", "--profile", str(path), "--workers", "2",
                             "--network", "ring:10Gb/s,5us", "--policy", "wfbp,dlsched",
                             "--json")
    assert code == 0, err
    assert '"policy": "dlsched"' in out


def test_invalid_plan_is_refused_before_training(tiny: tuple) -> None:
    """A plan that loses a layer's bytes fails with the validator's message (the plan printed
    with the bad message marked), before any process-group call."""
    module, result = tiny
    problem = problem_from_profile(result, "ring:10Gb/s,5us", 2)
    plan = POLICIES["wfbp"](problem)
    broken = DPPlan(plan.messages[:-1], plan.barrier, "broken")
    with pytest.raises(PlanError, match=r"invalid data-parallel plan \(broken\)[\s\S]*lost"):
        PlanExecutor(module, problem, broken, optimizer_factory("sgd", 0.1))
    duplicated = DPPlan((*plan.messages, Message((Block(0, 0, 4),), plan.messages[-1].launch)),
                        plan.barrier, "duplicated")
    with pytest.raises(PlanError, match="duplicated"):
        PlanExecutor(module, problem, duplicated, optimizer_factory("sgd", 0.1))


def test_fits_recover_hand_made_alpha_beta_and_ring() -> None:
    """Samples on t = 100 us + x / 1 GB/s give alpha = 100 us, bandwidth = 1 GB/s; over 4
    ranks the ring reading is latency alpha / 6 and link bandwidth 6/4 x 1 GB/s."""
    samples = [(x, 100e-6 + x / 1e9) for x in (4096, 65536, 2**20, 2**24)]
    result = fit(samples, 4)
    assert math.isclose(result["alpha_beta"]["alpha"], 100e-6, rel_tol=1e-6)
    assert math.isclose(result["alpha_beta"]["bandwidth"], 1e9, rel_tol=1e-6)
    assert math.isclose(result["ring"]["latency"], 100e-6 / 6, rel_tol=1e-6)
    assert math.isclose(result["ring"]["bandwidth"], 1.5e9, rel_tol=1e-6)


def test_piecewise_fit_finds_two_regimes() -> None:
    """Small messages on t = 50 us + x / 0.5 GB/s, large on t = 1 ms + x / 2 GB/s: the split
    falls between them and each segment recovers its own line."""
    small = [(x, 50e-6 + x / 0.5e9) for x in (1024, 4096, 16384)]
    large = [(x, 1e-3 + x / 2e9) for x in (2**22, 2**24, 2**26)]
    segments = fit(small + large, 2)["piecewise"]
    assert segments[0]["up_to"] == 16384
    assert math.isclose(segments[0]["alpha"], 50e-6, rel_tol=1e-6)
    assert math.isclose(segments[1]["bandwidth"], 2e9, rel_tol=1e-6)


def test_piecewise_fit_needs_three_samples_per_segment() -> None:
    """On one line t = 5 ms + x / 0.5 GB/s with the two smallest samples disturbed (-30% and
    +60%), a two-sample segment fits them exactly (alpha 0, 1.1 MB/s: an 8 KiB message
    would cost 7.4 ms) and wins the search; with three samples per segment the small
    messages' segment keeps most of the 5 ms latency (hand fit: 3.4 ms)."""
    sizes = [4096 * 2**k for k in range(10)]
    samples = [(x, (5e-3 + x / 0.5e9) * noise)
               for x, noise in zip(sizes, [0.7, 1.6, *[1.0] * 8], strict=True)]
    first = fit(samples, 4)["piecewise"][0]
    assert first.get("up_to", sizes[-1]) >= sizes[2]
    assert 3e-3 < first["alpha"] < 5e-3


def test_network_file_round_trips(tmp_path) -> None:
    """The written file is the agreed ``kind: allreduce-cost`` document."""
    import yaml

    path = tmp_path / "net.yaml"
    write_network(network_document([(4096, 1e-4), (2**20, 1.1e-3)], 2, "t", "gloo",
                                   "alpha-beta"), path)
    document = yaml.safe_load(path.read_text())
    assert document["kind"] == "allreduce-cost" and document["model"] == "alpha-beta"
    assert document["workers"] == 2 and len(document["samples"]) == 2


def test_both_loads_give_an_idle_fit_and_an_under_load_fit(tmp_path) -> None:
    """Idle samples on 100 us + x / 1 GB/s, loaded on 300 us + x / 0.5 GB/s: the file's own
    fit is the idle line, its under_load block the loaded one with the compute slowdowns,
    read back as a TwoState."""
    from dlsched.dataparallel import parse_network
    from dlsched.dataparallel.comm import TwoState
    from dlsched.runtime.dataparallel.calibrate import loads_document

    sizes = (4096, 65536, 2**20, 2**24)
    timed = {"none": [(x, 100e-6 + x / 1e9) for x in sizes],
             "compute": [(x, 300e-6 + x / 0.5e9) for x in sizes],
             "compute_slowdown": [(4096, 1.2), (2**24, 2.0)]}
    path = tmp_path / "net.yaml"
    write_network(loads_document(timed, 2, "t", "gloo", "alpha-beta"), path)
    comm = parse_network(str(path), 2)
    assert isinstance(comm, TwoState)
    assert math.isclose(comm.cost(2**20), 100e-6 + 2**20 / 1e9, rel_tol=1e-6)
    assert math.isclose(comm.loaded.cost(2**20), 300e-6 + 2**20 / 0.5e9, rel_tol=1e-6)
    assert comm.compute_slowdown(4096) == 1.2 and comm.compute_slowdown(2**24) == 2.0
    one = loads_document({"compute": timed["compute"]}, 2, "t", "gloo", "alpha-beta")
    assert "under_load" not in one and one["measured_with"]["load"] == "compute"


def test_gpt_ties_embedding_and_head() -> None:
    """The GPT's head reuses the token embedding (one parameter, counted once)."""
    module = gpt(vocab=32, width=8, depth=1, heads=2, context=4)
    names = [n for n, _ in module.named_parameters()]
    assert names[0] == "wte.weight" and not any("head" in n for n in names)
    assert example_input(module, 3).shape == (3, 4)


def test_calibrated_file_is_accepted_by_dataparallel_network(tmp_path, run_cli) -> None:
    """``dlsched dataparallel --network`` reads the calibration file with each fit and prices
    a message with the chosen fit."""
    from dlsched.dataparallel import parse_network

    samples = [(x, 100e-6 + x / 1e9) for x in (4096, 65536, 2**20, 2**24)]
    for model in ("alpha-beta", "ring", "piecewise"):
        path = tmp_path / f"net-{model}.yaml"
        write_network(network_document(samples, 2, "t", "gloo", model), path)
        assert math.isclose(parse_network(str(path), 2).cost(2**20), 100e-6 + 2**20 / 1e9,
                            rel_tol=1e-6)
        code, _, err = run_cli("dataparallel", "--model", "resnet50", "--workers", "2",
                               "--network", str(path), "--policy", "wfbp,dlsched", "--json")
        assert code == 0, err


def test_scaled_medians_add_up_to_the_median_pass() -> None:
    """Time slices lost at random layers: per-layer medians (1, 1) miss them; scaled, they
    sum to the median pass total (4) and keep their proportions; no lost slice: unchanged."""
    import numpy as np

    from dlsched.runtime.dataparallel.profile import scaled_medians

    lost = np.array([[1.0, 1.0], [3.0, 1.0], [1.0, 3.0]])
    assert scaled_medians(lost).tolist() == [2.0, 2.0]
    steady = np.array([[1.0, 3.0], [1.0, 3.0], [2.0, 3.0]])
    assert scaled_medians(steady).tolist() == [1.0, 3.0]
    assert scaled_medians(np.zeros((2, 3))).tolist() == [0.0, 0.0, 0.0]


def test_layer_times_by_hand() -> None:
    """Two owners (layers 0-1 and 2), two passes without lost slices: ready (5, 4, 1) and
    (5, 4, 1) ms -> backward (1, 3, 1) ms; forwards (2, 1) ms plus updates (0.5, 0.25) ms go
    to each owner's last parameter: (0, 2.5, 1.25) ms. A gradient ready after a lower layer's
    is counted as ready with it (non-increasing ready times)."""
    import numpy as np

    from dlsched.runtime.dataparallel.profile import layer_times

    owners = [(None, [0, 1]), (None, [2])]
    forward = np.array([[2.0, 1.0], [2.0, 1.0]])
    ready = np.array([[5.0, 4.0, 1.0], [5.0, 4.0, 1.0]])
    fwd, bwd = layer_times(forward, ready, owners, np.array([0.5, 0.25]))
    assert fwd.tolist() == [0.0, 2.5, 1.25] and bwd.tolist() == [1.0, 3.0, 1.0]
    _, late = layer_times(forward, np.array([[5.0, 4.0, 6.0], [5.0, 4.0, 6.0]]), owners)
    assert late.tolist() == [0.0, 0.0, 6.0]


def test_slowest_rank_per_iteration() -> None:
    """Iteration 0: rank 1 is slower (3 + 5 > 2 + 4); iteration 1: rank 0 (4 + 6 > 1 + 2):
    each iteration keeps the whole row of its slowest rank."""
    import numpy as np

    from dlsched.runtime.dataparallel.train import slowest_iterations

    rank0 = (np.array([[2.0], [4.0]]), np.array([[4.0, 1.0], [6.0, 2.0]]))
    rank1 = (np.array([[3.0], [1.0]]), np.array([[5.0, 2.0], [2.0, 1.0]]))
    forward, ready = slowest_iterations([rank0, rank1])
    assert forward.tolist() == [[3.0], [4.0]]
    assert ready.tolist() == [[5.0, 2.0], [6.0, 2.0]]


def test_rounds_pool_every_iteration_not_the_rounds_medians() -> None:
    """A one-parameter module profiled in two rounds (3 iterations at 1, 2, 3 s; then 5 at
    10..14 s): each time is the median of all 8 iterations, (10 + 11) / 2 = 10.5 s, not the
    mean of the rounds' medians (2 + 12) / 2 = 7 s; with no rows the plain-pass profile."""
    import numpy as np
    import torch

    from dlsched.runtime.dataparallel.train import RoundProfiler, TrainConfig

    module = torch.nn.Linear(2, 2, bias=False)
    passes = profile(module, torch.ones(1, 2), warmup=0, repeats=1)
    profiler = RoundProfiler(module, None, TrainConfig(), 2, passes)
    assert profiler.pooled() is passes
    for times in ([1.0, 2.0, 3.0], [10.0, 11.0, 12.0, 13.0, 14.0]):
        column = np.array(times)[:, None]
        profiler.rows.append((column, column))
    (layer,) = profiler.pooled().layers
    assert layer.forward_time_s == 10.5 and layer.backward_time_s == 10.5


def test_rounds_rotate_the_policy_order() -> None:
    """Six policies in three rounds start at the first, the third and the fifth: over the
    rounds each policy runs early, midway and late."""
    from dlsched.runtime.dataparallel.train import rotated

    policies = ("a", "b", "c", "d", "e", "f")
    assert [rotated(policies, r, 3) for r in range(3)] == [
        policies, ("c", "d", "e", "f", "a", "b"), ("e", "f", "a", "b", "c", "d")]
    assert rotated(policies, 0, 1) == policies
