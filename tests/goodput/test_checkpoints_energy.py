"""Checkpoint sizes and times by hand (goodput.checkpoints), energy by hand (goodput.energy),
counts with suffixes (goodput.counts)."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from dlsched.errors import ConfigError
from dlsched.goodput.checkpoints import (
    PCIE_HOST_BANDWIDTH,
    Storage,
    checkpoint_plan,
    load_storage,
    shard_bytes,
)
from dlsched.goodput.counts import parse_count
from dlsched.goodput.energy import power_model, run_energy

GB = 1e9


def test_shard_bytes_by_hand() -> None:
    """2 GB of weights and 1.5 GB of optimizer per GPU over 4 replicas: ZeRO 1 writes 2/4 +
    1.5 = 2 GB per GPU; ZeRO 0 (optimizer replicated too) 2/4 + 1.5/4 = 0.875 GB; ZeRO 3
    (both sharded) 3.5 GB."""
    assert shard_bytes(2 * GB, 1.5 * GB, 1, 4) == pytest.approx(2 * GB)
    assert shard_bytes(2 * GB, 1.5 * GB, 0, 4) == pytest.approx(0.875 * GB)
    assert shard_bytes(2 * GB, 1.5 * GB, 3, 4) == pytest.approx(3.5 * GB)


def test_checkpoint_of_a_small_plan_by_hand() -> None:
    """1.2B parameters, TP2 PP2 DP4 (16 GPUs, 8 per node), bf16 with ZeRO 1: a GPU holds 0.3B
    parameters, 0.6 GB of weights and 12 B x 0.3B / 4 = 0.9 GB of optimizer; it writes
    0.6/4 + 0.9 = 1.05 GB, 16.8 GB in all = 1.2B x 14 B; a node 8.4 GB: at 4.2 GB/s per node, 2
    s. The restart reads 1.5 GB per GPU, 12 GB per node: 12 / 4.2 s."""
    storage = Storage("test", 4.2 * GB, None, "by hand")
    plan = checkpoint_plan(0.6 * GB, 0.9 * GB, 1, 4, 16, 8, storage)
    assert plan.total_bytes == pytest.approx(1.2e9 * 14)
    assert plan.node_bytes == pytest.approx(8.4 * GB)
    assert plan.save_s == pytest.approx(2.0)
    assert plan.blocking_s == plan.save_s and plan.durable_s == 0.0
    assert plan.load_s == pytest.approx(12 / 4.2)
    slow_fs = Storage("test", 4.2 * GB, 1 * GB, "by hand")  # 16.8 GB at 1 GB/s aggregate
    assert checkpoint_plan(0.6 * GB, 0.9 * GB, 1, 4, 16, 8, slow_fs).save_s == pytest.approx(16.8)


def test_async_blocks_for_the_snapshot_only() -> None:
    """H100: 1.05 GB over PCIe Gen5 at 64 GB/s blocks 16.4 ms; the write follows in 2 s; the
    node pins its 8.4 GB."""
    storage = Storage("test", 4.2 * GB, None, "by hand")
    plan = checkpoint_plan(0.6 * GB, 0.9 * GB, 1, 4, 16, 8, storage, "async", "h100")
    assert plan.blocking_s == pytest.approx(1.05 / 64)
    assert plan.durable_s == pytest.approx(2.0)
    assert plan.host_bytes == pytest.approx(8.4 * GB)


def test_storage_input() -> None:
    assert load_storage("25 GB/s").per_node == 25e9
    assert load_storage("tectonic").aggregate == 2e12
    total = load_storage("200 GB/s total")
    assert total.aggregate == 200e9 and total.per_node is None
    with pytest.raises(ConfigError, match="storage: 'fast' is not accepted"):
        load_storage("fast")
    with pytest.raises(ConfigError, match=r"^checkpoint: 'lazy' is not accepted"):
        checkpoint_plan(1.0, 1.0, 1, 1, 8, 8, load_storage("tectonic"), "lazy")


def test_energy_by_hand() -> None:
    """H100: busy 700 W, idle 700 - 1e7 / 16384 = 89.65 W, host 10.2 kW x 8.4 / 10.2 - 5.6 kW =
    2.8 kW. 16 GPUs on 2 nodes, one hour at busy 0.5 and half an hour waiting, PUE 1.1, $2 per
    GPU-hour."""
    model = power_model("h100")
    idle = 700 - 1e7 / 16384
    assert model.idle_w == pytest.approx(idle)
    assert model.host_w == pytest.approx(2800.0)
    out = run_energy(model, 16, 2, 3600.0, 1800.0, 0.5, pue=1.1, gpu_hour_price=2.0)
    gpu_j = 16 * ((idle + (700 - idle) * 0.5) * 3600 + idle * 1800)
    host_j = 2 * 2800 * 5400
    assert out.it_j == pytest.approx(gpu_j + host_j)
    assert out.mwh == pytest.approx((gpu_j + host_j) * 1.1 / 3.6e9)
    assert out.cost == pytest.approx(16 * 1.5 * 2.0)


def test_new_gpus_power_by_hand() -> None:
    """Datasheet figures (goodput.energy): B300 1,100 W on a 14.5 kW DGX B300, host 14,500 x
    8.4 / 10.2 - 8 x 1,100 = 3,141.2 W per 8 GPUs; GB200 1,200 W on a 120 kW NVL72 rack, host
    120,000 x 8.4 / 10.2 - 72 x 1,200 = 12,423.5 W per 72 GPUs (690.2 W per 4-GPU tray); GB300
    1,400 W with the GB200 rack's host (its ~120 kW rating leaves none); MI300X 750 W, H800 700 W
    and the Grand Teton H100 500 W with the DGX H100's 2.8 kW host. Idle 12.8% of TDP."""
    idle_fraction = 1 - 1e7 / (16384 * 700)
    cases = {("b300", 8): (1100.0, 14500 * 8.4 / 10.2 - 8800),
             ("gb200", 72): (1200.0, 120000 * 8.4 / 10.2 - 86400),
             ("gb200", 4): (1200.0, (120000 * 8.4 / 10.2 - 86400) * 4 / 72),
             ("gb300", 72): (1400.0, 120000 * 8.4 / 10.2 - 86400),
             ("mi300x", 8): (750.0, 2800.0), ("h800", 8): (700.0, 2800.0),
             ("h100-hbm2e-96gb", 8): (500.0, 2800.0)}
    for (gpu, per_node), (tdp, host) in cases.items():
        model = power_model(gpu, per_node)
        assert model.busy_w == pytest.approx(tdp)
        assert model.idle_w == pytest.approx(tdp * idle_fraction)
        assert model.host_w == pytest.approx(host)
    assert power_model("b300").host_w == pytest.approx(3141.18, abs=0.01)
    assert power_model("gb200", 72).host_w == pytest.approx(12423.53, abs=0.01)


def test_every_gpu_preset_has_power_figures() -> None:
    """Every bundled GPU preset is priced, with a positive host draw (a preset added without
    figures fails here, not in a user's plan)."""
    names = yaml.safe_load(resources.files("dlsched.presets").joinpath("gpus.yaml").read_text())
    for name in names:
        assert power_model(name).host_w > 0, name
        assert name in PCIE_HOST_BANDWIDTH, name


def test_async_snapshot_over_c2c_by_hand() -> None:
    """GB200: the snapshot copies over NVLink-C2C at 225 GB/s per GPU one way (900 GB/s both
    ways per Grace, two GPUs each), not PCIe: 2 GB of weights over 4 replicas + 12 GB of
    optimizer (ZeRO 1) = 12.5 GB per GPU, 55.6 ms; an H800 at PCIe Gen5's 64 GB/s 195.3 ms."""
    tectonic = load_storage("tectonic")
    gb200 = checkpoint_plan(2 * GB, 12 * GB, 1, 4, 8, 4, tectonic, "async", "gb200")
    h800 = checkpoint_plan(2 * GB, 12 * GB, 1, 4, 8, 8, tectonic, "async", "h800")
    assert gb200.blocking_s == pytest.approx(12.5 * GB / 225e9)
    assert h800.blocking_s == pytest.approx(12.5 * GB / 64e9)


def test_energy_refuses_bad_input() -> None:
    with pytest.raises(ConfigError, match=r"^pue: 0\.9 is not accepted"):
        run_energy(power_model("a100"), 8, 1, 1.0, 0.0, 1.0, pue=0.9)
    with pytest.raises(ConfigError, match=r"^gpu: 'tpu' has no power figures; accepted: v100, "):
        power_model("tpu")
    with pytest.raises(ConfigError, match="gpus per node: 0 is not accepted"):
        power_model("h100", 0)


@pytest.mark.parametrize(("text", "value"), [("15.6T", 15.6e12), ("500k", 5e5), ("2B", 2e9),
                                             ("1e6", 1e6), (1000, 1000.0)])
def test_counts(text: object, value: float) -> None:
    assert parse_count(text, "--tokens") == pytest.approx(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["15.6 X", "-3", "0", "T"])
def test_bad_counts_name_the_option(text: str) -> None:
    with pytest.raises(ConfigError, match="--tokens"):
        parse_count(text, "--tokens")
