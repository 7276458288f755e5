"""The GPU and node presets: datasheet figures, how each constant was obtained, and what the
planner builds from them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dlsched.config import bundled_presets
from dlsched.errors import ConfigError
from dlsched.hardware.gpu import KINDS, OPTIONAL, PROVENANCES, get_gpu, gpu_from_data
from dlsched.hardware.nodes import node_presets
from dlsched.hardware.topology import DimAlgorithm, DimKind
from dlsched.job.cluster import load_cluster, node_cluster
from dlsched.models.compute import calibrated

PRESETS = tuple(bundled_presets("gpus.yaml"))
A100_FIT = 0.7549  # a100 efficiency.gemm.bf16, fitted to SC21's 39.1B row
A100_MAMF = 271.2 / 312  # Bekman's MAMF table: A100 SXM BF16 271.2 of 312 TFLOP/s


def _constants(name: str) -> list[str]:
    """Every constant a preset gives, as the dotted names ``provenance`` keys use."""
    spec = get_gpu(name).spec
    names = ["peak", "sms", "memory", "memory_bandwidth", "memory_efficiency",
             "transpose_efficiency", "kernel_overhead", "backward_overhead"]
    if spec.best_published_utilization is not None:
        names.append("best_published_utilization")
    for kind, table in spec.efficiency.items():
        names += [f"efficiency.{kind}.{key}" for key in ("fp32", *OPTIONAL)
                  if getattr(table, key) is not None]
    return names


def _provenance(name: str, constant: str) -> str | None:
    """The provenance of ``constant``: its own key or the nearest enclosing one."""
    table = get_gpu(name).spec.provenance
    parts = constant.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in table:
            return table[".".join(parts[:end])]
    return None


@pytest.mark.parametrize("name", PRESETS)
def test_every_constant_says_how_it_was_obtained(name: str) -> None:
    """No preset constant without a provenance, and every one is one of the five kinds."""
    missing = [c for c in _constants(name) if _provenance(name, c) is None]
    assert missing == []
    assert set(get_gpu(name).spec.provenance.values()) <= set(PROVENANCES)


@pytest.mark.parametrize("name", PRESETS)
def test_datasheet_constants_are_cited_and_capacity_is_known(name: str) -> None:
    """Peaks, memory and bandwidth come from datasheets with a source; every preset has a
    capacity."""
    spec = get_gpu(name).spec
    assert spec.memory is not None and spec.memory > 16 * 2**30
    for constant in ("peak", "memory_bandwidth"):
        assert _provenance(name, constant) == "datasheet"
        assert constant in spec.sources


@pytest.mark.parametrize("name", ["h100", "h100-hbm2e-96gb", "h800", "h200", "b200", "gb200",
                                  "b300", "gb300", "mi300x"])
def test_dense_peaks_follow_the_datasheets_ratios(name: str) -> None:
    """Dense FP8 is twice dense BF16 and TF32 half of it on every tensor-core GPU here."""
    peak = get_gpu(name).spec.peak
    assert peak["fp8"] == pytest.approx(2 * peak["bf16"], rel=1e-3)
    assert peak["tf32"] == pytest.approx(peak["bf16"] / 2, rel=1e-3)


def test_system_datasheet_totals() -> None:
    """Per-GPU dense peaks times the GPUs of the system, doubled for sparsity, give the
    system datasheets' figures: HGX B200 36 PFLOP/s BF16 and 72 FP8 over 8 GPUs, GB200 NVL72
    360 and 720 over 72, MI300X 2,614.9 TFLOP/s BF16 with sparsity."""
    b200, gb200, mi300x = (get_gpu(n).spec.peak for n in ("b200", "gb200", "mi300x"))
    assert 8 * 2 * b200["bf16"] == pytest.approx(36e15)
    assert 8 * 2 * b200["fp8"] == pytest.approx(72e15)
    assert 72 * 2 * gb200["bf16"] == pytest.approx(360e15)
    assert 72 * 2 * gb200["fp8"] == pytest.approx(720e15)
    assert 2 * mi300x["bf16"] == pytest.approx(2614.8e12)


MI300X_FACTOR = 0.5975  # fitted on torchtitan-2508-mi300x-8b-bf16 (presets/gpus.yaml)


def test_the_mi300x_fit_scales_its_tensor_core_fractions_by_one_factor() -> None:
    """The mi300x 16-bit GEMM fraction is the a100 fit transferred by Bekman's MAMF ratio
    (MI300X 668.4 of 1,300 TFLOP/s against the A100's 271.2 of 312) times the factor fitted on
    TorchTitan's MI300X bf16 row; the attention fraction is the H100's FlashAttention-2 0.3386
    times the same factor, and the FP8 fraction the fitted 16-bit one times AMD's published
    MAF ratio (MI300X FP8 1,273 of 2,614.9 TFLOP/s against BF16 708 of 1,307.4)."""
    spec = get_gpu("mi300x").spec
    transferred = A100_FIT * (668.4 / 1300) / A100_MAMF  # 0.4465
    assert spec.efficiency["gemm"].bf16 == pytest.approx(transferred * MI300X_FACTOR, abs=5e-5)
    assert spec.efficiency["attention"].bf16 == pytest.approx(0.3386 * MI300X_FACTOR, abs=5e-5)
    assert spec.efficiency["gemm"].fp8 == pytest.approx(
        spec.efficiency["gemm"].bf16 * (1273 / 2614.9) / (708 / 1307.4), abs=5e-5)
    assert _provenance("mi300x", "efficiency.gemm.bf16") == "fitted"
    assert "torchtitan-2508-mi300x-8b-bf16" in spec.sources["efficiency.gemm.bf16"]


H100_FIT = 0.6476  # fitted on dgxc-2504-h100-llama3.1-8b-bf16-8gpu (presets/gpus.yaml)
H100_MAMF = 794.5 / 989


@pytest.mark.parametrize(("name", "key", "mamf"), [  # MAMF / theory, TFLOP/s
    ("h100", "fp8", 1402.6 / 1979), ("h200", "bf16", 794.5 / 989),
    ("h200", "fp8", 1453.4 / 1979), ("h800", "bf16", 794.5 / 989),
    ("h800", "fp8", 1402.6 / 1979)])
def test_fractions_transferred_from_the_h100_fit_follow_the_published_ratio(
        name: str, key: str, mamf: float) -> None:
    """The h100's 16-bit fraction is fitted on one ledger row; the Hopper fractions
    transferred from it are the fit x the GPU's MAMF efficiency / the H100's BF16 one (H200
    BF16 'the same' as H100's: ratio 1; H800: the same die): 0.6476 x 0.7087 / 0.8034 =
    0.5713 for the H100's FP8, x 0.7344 / 0.8034 = 0.5920 for the H200's."""
    value = getattr(get_gpu(name).spec.efficiency["gemm"], key)
    assert _provenance("h100", "efficiency.gemm.bf16") == "fitted"
    assert _provenance(name, f"efficiency.gemm.{key}") == "transferred"
    assert value == pytest.approx(H100_FIT * mamf / H100_MAMF, abs=5e-5)


B200_FIT = 0.5062  # fitted on megatron-bridge-2511-b200-llama3.1-405b-cp2 (presets/gpus.yaml)
B200_MAMF = 1745.0 / 2250  # Bekman's MAMF table (b9e2972): B200 SXM BF16 1,745.0 of 2,250 TFLOP/s


@pytest.mark.parametrize(("name", "key", "mamf"), [  # MAMF / theory, TFLOP/s
    ("b200", "fp8", 3432.5 / 4500), ("gb200", "bf16", 1822.0 / 2500),
    ("gb200", "fp8", 3615.6 / 5000), ("b300", "bf16", 1769.0 / 2250),
    ("b300", "fp8", 3353.3 / 4500)])
def test_blackwell_fractions_transferred_from_the_b200_fit_follow_the_published_ratio(
        name: str, key: str, mamf: float) -> None:
    """The b200's 16-bit fraction is fitted on one ledger row; the Blackwell fractions
    transferred from it are the fit x the GPU's MAMF efficiency / the B200's BF16 one:
    0.5062 x 0.7628 / 0.7756 = 0.4979 for the B200's FP8, x 0.7288 / 0.7756 = 0.4757 for the
    GB200's BF16 (the same die at 1,200 W), x 0.7231 / 0.7756 = 0.4720 for its FP8, and for
    the B300 (Bekman's row of 2a1f0e9) x 0.7862 / 0.7756 = 0.5132 BF16, x 0.7452 / 0.7756 =
    0.4864 FP8."""
    value = getattr(get_gpu(name).spec.efficiency["gemm"], key)
    assert _provenance("b200", "efficiency.gemm.bf16") == "fitted"
    assert _provenance(name, f"efficiency.gemm.{key}") == "transferred"
    assert value == pytest.approx(B200_FIT * mamf / B200_MAMF, abs=5e-5)


def test_the_b200_fit_reproduces_its_row_and_only_that_row_is_not_held_out() -> None:
    """The b200 fit is the efficiency at which its one row (661 tokens/s per GPU) is predicted
    exactly: at the four digits the preset keeps, within 0.05% (the row's elasticity is 0.69,
    so a 5e-5 rounding of 0.5062 moves it at most 0.006%). No other B200 or GB200 row is
    named as fitted: every other one is held out."""
    from dlsched.ledger import load_ledger
    from dlsched.ledger.predict import FITTED_ROWS
    from dlsched.ledger.user_runs import price

    row_id = "megatron-bridge-2511-b200-llama3.1-405b-cp2"
    ledger = {row.id: row for row in load_ledger()}
    assert abs(price(ledger[row_id]).error) < 5e-4
    blackwell = {i for i, row in ledger.items() if row.hardware.gpu in ("b200", "gb200")}
    assert blackwell & set(FITTED_ROWS) == {row_id}


def test_mi300x_has_no_cudnn_attention_and_its_fp8_fraction_is_transferred() -> None:
    """cuDNN does not run on AMD GPUs; the FP8 fraction comes from AMD's published MAF ratio."""
    gpu = get_gpu("mi300x")
    with pytest.raises(ConfigError, match="fused_attention"):
        gpu.efficiency("fused_attention", "bf16")
    assert _provenance("mi300x", "efficiency.gemm.fp8") == "transferred"


def test_a_provenance_must_name_a_constant_and_a_known_kind() -> None:
    """A misspelt constant or an unknown provenance kind is refused, naming the field."""
    document = {"name": "x", **bundled_presets("gpus.yaml")["h100"]}
    with pytest.raises(ConfigError, match="provenance"):
        gpu_from_data({**document, "provenance": {"efficency.gemm": "measured"}}, "x")
    with pytest.raises(ConfigError, match="provenance"):
        gpu_from_data({**document, "provenance": {"sms": "guessed"}}, "x")


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_prices_a_kernel(name: str) -> None:
    """``dlsched compute --device NAME``'s model builds for every preset and every kind it
    gives prices at a positive rate no higher than the peak."""
    gpu = get_gpu(name)
    for kind in KINDS:
        for precision in gpu.precisions():
            rate = gpu.kind_rate(kind, precision)
            assert 0 < rate <= max(gpu.spec.peak.values())
    assert calibrated(name).gpu.name == name


def test_node_presets_name_gpu_presets_and_cite_sources() -> None:
    """Every node's GPU is a GPU preset and every node says where its figures come from."""
    for node in node_presets().values():
        assert node.gpu in PRESETS
        assert len(node.source) > 40


def test_node_links_as_the_datasheets_give_them() -> None:
    """Per GPU per direction: NVLink 5 900 GB/s (B200, GB200), H800's 400 GB/s both ways,
    MI300X's 7 Infinity Fabric links of 128 GB/s both ways, 400 Gb/s NICs."""
    nodes = node_presets()
    assert nodes["dgx-b200"].nvlink[0] == nodes["gb200-nvl72"].nvlink[0] == 900e9
    assert nodes["dgx-h800"].nvlink[0] == 400e9 / 2
    assert nodes["mi300x-8"].nvlink[0] == 7 * 128e9 / 2
    assert nodes["mi300x-8"].kind == "FullyConnected"
    blackwell_ultra = ("dgx-b300", "gb300-nvl72")  # one 800 Gb/s ConnectX-8 per GPU
    assert {node.nic.bandwidth for name, node in nodes.items()
            if name not in ("dgx-a100", *blackwell_ultra)} == {400e9 / 8}
    assert {nodes[name].nic.bandwidth for name in blackwell_ultra} == {800e9 / 8}
    assert nodes["dgx-b300"].nvlink[0] == nodes["gb300-nvl72"].nvlink[0] == 900e9


def test_gb200_nvl72_is_one_72_gpu_dimension() -> None:
    """144 GPUs of GB200 NVL72: a 72-GPU NVLink dimension (a ring: 72 is no power of two)
    and two racks over the NICs; the memory is the GPU's."""
    cluster = node_cluster("gb200-nvl72", 144)
    inside, across = cluster.topology.dims
    assert (inside.size, across.size) == (72, 2)
    assert inside.algorithm is DimAlgorithm.RING
    assert inside.bandwidth == 900e9
    assert cluster.memory == 186e9
    tp_group = cluster.group_topology(1, 8)
    assert tp_group is not None and tp_group.dims[0].size == 8


def test_a_job_on_64_gpus_of_each_nvl72_domain() -> None:
    """256 GPUs as Slurm segments of 64 (16 four-GPU trays per NVL72 rack, Megatron-Bridge's
    GB200 scripts): four 64-GPU NVLink domains (a power of two: halving-doubling, not the
    rack's ring) over the NICs;
    a 64-rank replica (TP 4 x PP 16) stays inside one domain, its DP group of 4 crosses the
    NICs. Without the domain 256 is refused (not a multiple of 72), and a domain larger than
    the rack is refused naming the accepted range."""
    cluster = node_cluster("gb200-nvl72", 256, domain=64)
    inside, across = cluster.topology.dims
    assert (inside.size, across.size) == (64, 4)
    assert inside.algorithm is DimAlgorithm.HALVING_DOUBLING and inside.bandwidth == 900e9
    assert across.bandwidth == 400e9 / 8
    dp_group = cluster.group_topology(64, 4)
    assert dp_group is not None and [d.size for d in dp_group.dims] == [4]
    assert dp_group.dims[0].bandwidth == 400e9 / 8
    with pytest.raises(ConfigError, match="multiple of 72"):
        node_cluster("gb200-nvl72", 256)
    with pytest.raises(ConfigError, match=r"^domain: 73 .*accepted: 1 to 72"):
        node_cluster("gb200-nvl72", 146, domain=73)


def test_mi300x_node_is_fully_connected() -> None:
    """The MI300X node's 8 GPUs form one fully connected dimension priced directly."""
    (dim,) = node_cluster("mi300x-8", 8).topology.dims
    assert dim.kind is DimKind.FULLY_CONNECTED and dim.algorithm is DimAlgorithm.DIRECT


def test_an_unknown_gpu_is_refused_naming_the_presets() -> None:
    """``--gpu nonsense`` is one line naming the field and every preset, before any search."""
    with pytest.raises(ConfigError) as error:
        load_cluster("dgx-h100", 8, "nonsense")
    message = str(error.value)
    assert error.value.field == "gpu" and message.startswith("gpu: unknown GPU 'nonsense'")
    assert all(name in message for name in PRESETS)


def test_memory_of_a_gpu_other_than_the_nodes_is_the_gpus() -> None:
    """``--gpu mi300x`` on dgx-h100 nodes takes the MI300X's 192 GB."""
    assert load_cluster("dgx-h100", 8, "mi300x").memory == 192e9
    assert load_cluster("dgx-h100", 8, None).memory == 80 * 2**30


def test_every_ledger_gpu_has_its_node_and_compute_preset() -> None:
    """A ledger row on any GPU the schema accepts is priced on a node preset of that GPU."""
    from typing import get_args

    from dlsched.ledger.predict import GPU_PRESETS
    from dlsched.ledger.schema import Gpu

    assert set(GPU_PRESETS) == set(get_args(Gpu))
    for node, gpu in GPU_PRESETS.values():
        assert node_presets()[node].gpu == gpu


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlsched", *args], capture_output=True,
                          text=True, timeout=300)


def test_the_commands_the_issue_names() -> None:
    """``compute --device b200`` keeps the GPU busy for less of a step than the h100 preset;
    ``plan --gpu mi300x`` plans on 192 GB GPUs; ``plan --gpu nonsense`` is one line naming the
    presets."""
    steps = {}
    for device in ("h100", "b200"):
        done = _cli("compute", "--model", "gpt2", "--batch-size", "64", "--device", device,
                    "--json")
        assert done.returncode == 0, done.stderr
        (row,) = json.loads(done.stdout)["rows"]
        steps[device] = row["gpu_busy_s"]
    assert steps["b200"] < steps["h100"]
    plan = ["plan", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8",
            "--global-batch", "16", "--tp", "1", "--pp", "1", "--microbatch-size", "2"]
    done = _cli(*plan, "--gpu", "mi300x", "--json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["rows"]
    assert row["memory_gib"] < 192e9 / 2**30
    done = _cli(*plan, "--gpu", "nonsense")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("error: --gpu: unknown GPU 'nonsense'")
    assert "mi300x" in done.stderr and "b200" in done.stderr


def test_an_unknown_gpu_carries_its_field_apart_from_its_reason() -> None:
    """``get_gpu('nonsense')`` is field ``device``; the reason is the message without that
    label, so ``--gpu`` takes the label's place (no ``device:`` left, none doubled)."""
    with pytest.raises(ConfigError) as error:
        get_gpu("nonsense")
    assert error.value.field == "device"
    assert str(error.value) == f"device: {error.value.reason}"
    assert error.value.reason.startswith("unknown GPU 'nonsense'; accepted: ")
    renamed = str(error.value.renamed("--gpu"))
    assert renamed.startswith("--gpu: unknown GPU 'nonsense'") and "device" not in renamed


def test_blackwell_ultra_peaks_are_the_system_datasheets_totals() -> None:
    """HGX B300: 36 PFLOP/s BF16 and 72 FP8 with sparsity over 8 GPUs (the HGX B200's);
    GB300 NVL72: 360 and 720 over 72 (the GB200 NVL72's); 288 GB of HBM3e at 8 TB/s each."""
    b300, gb300 = (get_gpu(n).spec for n in ("b300", "gb300"))
    assert 8 * 2 * b300.peak["bf16"] == pytest.approx(36e15)
    assert 8 * 2 * b300.peak["fp8"] == pytest.approx(72e15)
    assert 72 * 2 * gb300.peak["bf16"] == pytest.approx(360e15)
    assert 72 * 2 * gb300.peak["fp8"] == pytest.approx(720e15)
    assert b300.memory == gb300.memory == 288e9
    assert b300.memory_bandwidth == gb300.memory_bandwidth == 8e12
    assert 8 * b300.peak["fp4"] == pytest.approx(108e15)  # HGX B300: FP4 108 PFLOP/s dense
    assert 72 * gb300.peak["fp4"] == pytest.approx(1080e15)  # GB300 NVL72: 1,080 dense


def test_fp4_peaks_are_the_datasheets_and_the_fractions_assumed() -> None:
    """Dense FP4 per GPU: HGX B200 144 PFLOP/s with sparsity over 8 GPUs (9,000 TFLOP/s
    dense), GB200 NVL72 1,440 over 72 (10,000), B300 13,500, GB300 15,000: 2x FP8 on
    Blackwell, 3x on Blackwell Ultra; no FP4 peak before Blackwell. The FP4 GEMM fraction is
    each GPU's FP8 one, ``assumed`` (no published NVFP4 matmul efficiency), none fitted."""
    peaks = {name: get_gpu(name).spec.peak for name in ("b200", "gb200", "b300", "gb300")}
    assert 8 * 2 * peaks["b200"]["fp4"] == pytest.approx(144e15)
    assert 72 * 2 * peaks["gb200"]["fp4"] == pytest.approx(1440e15)
    assert [peaks[n]["fp4"] / peaks[n]["fp8"] for n in peaks] == pytest.approx([2, 2, 3, 3])
    for name in peaks:
        spec = get_gpu(name).spec
        assert spec.efficiency["gemm"].fp4 == spec.efficiency["gemm"].fp8
        assert spec.provenance["efficiency.gemm.fp4"] == "assumed"
    for name in ("h100", "h200", "a100", "mi300x"):
        assert "fp4" not in get_gpu(name).spec.peak
        assert "fp4" not in get_gpu(name).precisions()


@pytest.mark.parametrize(("ultra", "base"), [("b300", "b200"), ("gb300", "gb200")])
def test_blackwell_ultra_fractions_are_transferred_not_fitted(ultra: str, base: str) -> None:
    """Blackwell Ultra's datasheet peaks are its Blackwell sibling's (the same BF16 / FP8
    tensor-core rates; FP4 1.5x the sibling's); its GEMM fractions are transferred, the
    GB300's at ratio 1 from the GB200 (no GB300 matmul measurement), the B300's by its own
    measured MAMF rate (the test above); its cuDNN attention is measured on a GB300 (the B300's
    transferred from it, tests/models/test_fused_attention.py) and faster than the sibling's on
    long rows; none is fitted (every B300 / GB300 row held out)."""
    new, old = get_gpu(ultra).spec, get_gpu(base).spec
    assert new.peak == {**old.peak, "fp32": new.peak["fp32"], "fp4": 1.5 * old.peak["fp4"]}
    for key in ("bf16", "fp8"):
        if ultra == "gb300":
            assert getattr(new.efficiency["gemm"], key) == getattr(old.efficiency["gemm"], key)
        assert _provenance(ultra, f"efficiency.gemm.{key}") == "transferred"
    assert new.efficiency["fused_attention"].bf16 > old.efficiency["fused_attention"].bf16
    assert _provenance(ultra, "efficiency.fused_attention") in ("measured", "transferred")
    assert "fitted" not in new.provenance.values()


def test_gb300_nvl72_is_one_72_gpu_dimension_with_800_gbps_nics() -> None:
    """144 GB300s: a 72-GPU NVLink ring and two racks over 800 Gb/s ConnectX-8 NICs; the
    memory is the GB300 preset's."""
    cluster = node_cluster("gb300-nvl72", 144)
    inside, across = cluster.topology.dims
    assert (inside.size, across.size) == (72, 2)
    assert inside.algorithm is DimAlgorithm.RING and inside.bandwidth == 900e9
    assert across.bandwidth == 800e9 / 8
    assert cluster.memory == 288e9


def test_blackwell_ultra_runs_mxfp8_and_nccls_blackwell_tuning() -> None:
    """Compute capability 10.3 is Transformer Engine's Blackwell ((10, 0) <= cc < (12, 0)):
    MXFP8 is accepted on b300 / gb300 and refused on h100; NCCL's tuning is Blackwell's, the
    GB300 NVL72 host Grace (Arm), the DGX B300's Intel."""
    from dlsched.collectives.nccl import nccl_node
    from dlsched.job.compute.fp8 import check_fp8

    for name in ("b300", "gb300"):
        assert check_fp8("fp8", "mxfp8", name, get_gpu(name).spec.peak) == "mxfp8"
    with pytest.raises(ConfigError, match="mxfp8 needs"):
        check_fp8("fp8", "mxfp8", "h100", get_gpu("h100").spec.peak)
    rack = nccl_node("gb300-nvl72", "gb300", 900e9, 100e9, True)
    node = nccl_node("dgx-b300", "b300", 900e9, 100e9, True)
    assert rack is not None and node is not None
    assert (rack.arch, rack.cpu, node.arch, node.cpu) == ("blackwell", "arm", "blackwell", "intel")
