"""``dlsched plan --tokens`` / ``--objective``: the time-to-train columns of a plan row, by
hand from the row, in every output format, and a plan chosen by time to train that is not the
iteration-best one."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from dlsched.errors import ConfigError
from dlsched.goodput.failures import job_mtbf
from dlsched.goodput.time_to_train import Settings, time_to_train
from dlsched.job.model_spec import load_spec
from dlsched.job.scenario import PlanScenario

GIVEN = {"model": "llama3-8b", "cluster": "dgx-h100", "gpus": 64, "global_batch": 256,
         "tp": 2, "pp": 2, "dp": 16, "chunks": 1, "microbatch_size": 1, "schedule": "1f1b",
         "recompute": "selective", "sequence_parallel": True, "zero": 1}


def _row(**settings: object) -> dict[str, object]:
    row, = PlanScenario(**GIVEN, **settings).run().rows  # type: ignore[arg-type]
    return row


def test_time_to_train_columns_by_hand_from_the_row() -> None:
    """1T tokens at 256 x 8,192 per iteration: 476,838 iterations; GPU-hours = 64 x days x 24;
    interruptions per day = 24 / the job's MTBF in hours; the checkpoint is every GPU's
    weights over its DP replicas plus its optimizer shard (ZeRO 1)."""
    row = _row(tokens="1T", gpu_hour_price=2.5)
    assert row["iterations"] == math.ceil(1e12 / (256 * 8192))
    assert row["gpu_hours"] == pytest.approx(64 * row["ttt_days"] * 24)
    assert row["cost"] == pytest.approx(row["gpu_hours"] * 2.5)
    assert row["interruptions_per_day"] == pytest.approx(86400 / job_mtbf(64))
    share = row["memory_weights_gib"] / 16 + row["memory_optimizer_gib"]
    assert row["checkpoint_gb"] == pytest.approx(share * 2**30 * 64 / 1e9)
    # = 2 + 12 B per parameter of the model, but for the TP padding of the vocabulary and the
    # peak stage's parts standing for both stages
    parameters = load_spec("llama3-8b").parameters()
    assert row["checkpoint_gb"] == pytest.approx(14 * parameters / 1e9, rel=1e-3)
    assert 0.99 < row["goodput"] < 1.0  # 64 GPUs: a failure every ~33 days of the job
    assert row["iteration_p95_s"] >= row["iteration_p50_s"] > row["iteration_s"] * 0.999
    days = row["iterations"] * row["iteration_mean_s"] / row["goodput"] / 86400
    assert row["ttt_days"] == pytest.approx(days)


def test_iterations_and_tokens_agree_and_exclude_each_other() -> None:
    by_tokens = _row(tokens=f"{476838 * 256 * 8192}")
    by_iterations = _row(iterations="476838")
    assert by_tokens["ttt_days"] == pytest.approx(by_iterations["ttt_days"])
    with pytest.raises(ConfigError, match="--tokens / --iterations"):
        _row(tokens="1T", iterations="10")
    assert "ttt_days" not in _row()


def test_async_checkpoints_block_less() -> None:
    sync, asynchronous = _row(tokens="1T"), _row(tokens="1T", checkpoint="async")
    assert asynchronous["checkpoint_blocking_s"] < sync["checkpoint_blocking_s"]
    assert asynchronous["checkpoint_host_gib"] > 0 == sync["checkpoint_host_gib"]


def test_every_output_format_has_the_columns(run_cli, tmp_path: Path) -> None:
    options = [f"--{k.replace('_', '-')}={v}" for k, v in GIVEN.items()
               if k != "sequence_parallel"]
    args = ["plan", *options, "--sequence-parallel", "--tokens", "1T"]
    code, out, _ = run_cli(*args, "--json")
    assert code == 0 and json.loads(out)["rows"][0]["ttt_days"] > 0
    code, out, _ = run_cli(*args, "--csv", str(tmp_path / "r.csv"))
    assert code == 0 and "Time to train" in out and "goodput" in out
    with open(tmp_path / "r.csv", newline="") as handle:
        assert float(next(csv.DictReader(handle))["energy_mwh"]) > 0


def test_time_to_train_objective_can_choose_another_plan() -> None:
    """Llama 3 405B on 16,384 H100s with 200 GB/s of storage in all: restarts read every
    replica's weights, so a plan with half the data-parallel replicas (PP 64 DP 32) restarts
    in 155 s instead of 286 s and trains sooner than the search's own choice although its
    iteration is longer; the reason, naming both iterations, is among the notes."""
    common = {"model": "llama3-405b", "cluster": "dgx-h100", "gpus": 16384, "tokens": "15.6T",
              "storage": "200 GB/s total", "baselines": False}
    fastest, = PlanScenario(**common).run().rows  # type: ignore[arg-type]
    report = PlanScenario(**common, objective="time-to-train").run()  # type: ignore[arg-type]
    chosen, = report.rows
    assert chosen["layout"] != fastest["layout"]
    assert chosen["ttt_days"] < fastest["ttt_days"]
    why = [note for note in report.notes if note.startswith("--objective time-to-train: chose")]
    assert len(why) == 1 and "iteration " in why[0] and "time to train " in why[0]


def test_rack_energy_by_hand_and_per_gpu() -> None:
    """One plan row priced on GB200 and GB300 NVL72 racks (goodput.time_to_train): the same
    wall time (same row, same C2C snapshot link), GPU energy in proportion to TDP (idle a fixed
    share of it) and the same host, 12,423.5 W per 72-GPU rack (120 kW x 8.4 / 10.2 - 72 x
    1,200 W): E_gb300 - E_gb200 = (1,400 / 1,200 - 1) x (E_gb200 - PUE x 2 racks x host x
    wall). Pricing the rack as eighteen 4-GPU trays gives the same energy (host per GPU)."""
    row = {"gpus": 144, "tp": 1, "cp": 1, "pp": 1, "dp": 144, "zero": 1, "global_batch": 576,
           "iteration_s": 2.0, "exposed_dp_s": 0.2, "memory_weights_gib": 15.0,
           "memory_optimizer_gib": 0.7}
    settings = Settings(tokens="100B")
    gb200 = time_to_train(row, 8192, "gb200", 72, settings)
    gb300 = time_to_train(row, 8192, "gb300", 72, settings)
    trays = time_to_train(row, 8192, "gb200", 4, settings)
    assert gb300["ttt_days"] == gb200["ttt_days"]
    host_mwh = 1.1 * 2 * (120000 * 8.4 / 10.2 - 72 * 1200) * gb200["ttt_days"] * 86400 / 3.6e9
    gpu_mwh = gb200["energy_mwh"] - host_mwh
    assert gb300["energy_mwh"] - gb200["energy_mwh"] == pytest.approx(gpu_mwh * (1400 / 1200 - 1))
    assert trays["energy_mwh"] == pytest.approx(gb200["energy_mwh"])
