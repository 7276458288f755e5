"""Energy (joules, reported in MWh) and cost of a training run.

**GPU power** at busy fraction ``b`` (the share of the iteration a GPU computes: the plan's
iteration minus its exposed communication): ``idle + (TDP - idle) b``. TDPs, the datasheets'
maximum board power per GPU preset (``TDP_W``, each with its source). Idle: 12.8% of TDP, from
the Llama 3 report's observation that the whole 16,384-GPU job stopping at once (e.g. every GPU
waiting on a checkpoint) swings the data centre's power "on the order of tens of megawatts" (The
Llama 3 Herd of Models, Sec. 3.3.4): at least 10 MW over 16,384 GPUs is 610 W of an H100's
700 W, an idle draw of at most 90 W; we take that bound, as a fraction of TDP, for every GPU.

**Node overhead** (CPUs, memory, NICs, fans, switch trays): Latif et al., "Empirical
Measurements of AI Training Power Demand on a GPU-Accelerated Node" (IEEE Access 13, 2025),
measured at most 8.4 kW on an 8-GPU H100 HGX node training at near full utilization, 82% of its
10.2 kW rating. We take each node type's rated maximum (``NODE_RATED_W``: watts and the GPUs it
holds; an NVL72 rack is 72 GPUs) times that 8.4/10.2, less its GPUs at TDP, as its host draw per
GPU (H100: 2.8 kW per 8 GPUs), at all times, times the plan's GPUs per node. Where no rating is
published, or the published one leaves no host draw, the host per GPU of the closest node
stands in (``HOST_STAND_IN``, each with its reason). **Facility**: times the power usage
effectiveness ``pue`` (default 1.10: Google's fleet-wide trailing-twelve-month PUE, 2023,
google.com/about/datacenters/efficiency).
"""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.errors import ConfigError

TDP_W = {  # maximum board power per GPU (watts), by GPU preset
    "v100": 300.0,   # NVIDIA V100 datasheet, SXM2
    "a100": 400.0,   # NVIDIA A100 datasheet, SXM
    "h100": 700.0,   # NVIDIA H100 datasheet, SXM5
    "h200": 700.0,   # NVIDIA H200 datasheet, SXM
    "b200": 1000.0,  # NVIDIA HGX B200: 1,000 W per GPU
    # H800 SXM5, the H100 SXM5 board with its NVLink cut: 700 W (huggingface.co/hardware/h800;
    # NVIDIA's H800 datasheet itself not read here)
    "h800": 700.0,
    # Meta's Grand Teton H100 96 GB HBM2e: pytorch/torchtitan benchmarks/
    # llama3_h100_202412_torchtitan.md (31a17bf), "500 W" (the ledger rows' gpu_power_w 500)
    "h100-hbm2e-96gb": 500.0,
    # NVIDIA DPS device specifications (docs.nvidia.com/datacenter/dps, "Device
    # Specifications"): GB200 GPU maxLoadWatts 1200, the NVL72 configuration
    "gb200": 1200.0,
    # NVIDIA/dgxc-benchmarking README (841f546), 'B300 Reference Architecture': 8x B300, 1,100 W
    "b300": 1100.0,
    # the same README, 'GB300 Reference Architecture': up to 1,400 W per GPU (NVL72)
    "gb300": 1400.0,
    # MI300X OAM: 750 W, AMD's launch footnote (June 2023, reported by Tom's Hardware, "AMD
    # MI300X guzzles power, rated for 750 watts"); AMD's MLPerf Inference v4.1 system
    # description (closed/AMD/systems/8xMI300X_2xEPYC-9374F.json) names it
    # "MI300X-NPS1-SPX-192GB-750W"
    "mi300x": 750.0,
}
NODE_RATED_W = {  # datasheet maximum system power (watts) and the GPUs it holds
    "v100": (3500.0, 8),    # DGX-1 with V100
    "a100": (6500.0, 8),    # DGX A100
    "h100": (10200.0, 8),   # DGX H100
    "h200": (10200.0, 8),   # DGX H200
    "b200": (14300.0, 8),   # DGX B200 user guide, power specifications: 14.3 kW max
    # DGX B300: 14.5 kW, NVIDIA's DGX B300 system power as quoted from docs.nvidia.com by
    # thedailyscout.com ("NVIDIA GPUs push 1,200W power draw"); not read on NVIDIA's own page
    "b300": (14500.0, 8),
    # GB200 NVL72: NVIDIA DPS device specifications, DGX_GB200 compute tray (2 Grace, 4 GB200)
    # maxLoadWatts 6,667; 18 trays = 120.0 kW per 72 GPUs, the rack's 120 kW reported from
    # GTC 2024 (ServeTheHome / The Register), switch trays included in that rack figure
    "gb200": (120000.0, 72),
}
HOST_STAND_IN = {  # GPU preset -> the preset whose node's host draw per GPU stands in
    # no DGX H800 rating found; the DGX H800 is the DGX H100 chassis (CPUs, NICs, power
    # supplies) with the H800 board
    "h800": "h100",
    # Meta publishes no Grand Teton power rating; the same HGX H100 baseboard and dual-socket
    # x86 host as a DGX H100
    "h100-hbm2e-96gb": "h100",
    # no 8-GPU MI300X platform rating published by AMD; an 8-OAM baseboard, two x86 sockets
    # and one 400 Gb/s NIC per GPU, as a DGX H100 (which adds NVSwitches: an upper bound)
    "mi300x": "h100",
    # the GB300 NVL72 rack is reported at ~120 kW (as GB200's), which at 8.4/10.2 is below its
    # 72 GPUs at 1,400 W: no host draw follows; the GB200 NVL72's (same 36 Grace CPUs, 18
    # compute and 9 NVLink switch trays) stands in
    "gb300": "gb200",
}
MEASURED_OVER_RATED = 8.4 / 10.2  # Latif et al. 2025: measured peak over rating, H100 node
IDLE_FRACTION = 1.0 - 10e6 / (16384 * 700.0)  # Llama 3 Sec. 3.3.4 (module docstring)
DEFAULT_PUE = 1.10
JOULES_PER_MWH = 3.6e9


@dataclass(frozen=True)
class PowerModel:
    """Watts of one GPU busy and idle, and of one node's host."""

    busy_w: float
    idle_w: float
    host_w: float


def host_per_gpu_w(gpu: str) -> float:
    """Watts of host (everything but the GPUs) per GPU of the GPU preset's node (module
    docstring): rated maximum x 8.4/10.2 over its GPUs, less one GPU's TDP."""
    source = HOST_STAND_IN.get(gpu, gpu)
    rated, gpus = NODE_RATED_W[source]
    return rated * MEASURED_OVER_RATED / gpus - TDP_W[source]


def power_model(gpu: str, gpus_per_node: int = 8) -> PowerModel:
    """The GPU preset's power (module docstring) with ``gpus_per_node`` GPUs per node;
    ConfigError for a GPU without power figures."""
    key = gpu.lower()
    if key not in TDP_W:
        raise ConfigError(f"gpu: {gpu!r} has no power figures; accepted: " + ", ".join(TDP_W))
    if gpus_per_node < 1:
        raise ConfigError(f"gpus per node: {gpus_per_node} is not accepted; accepted: >= 1")
    tdp = TDP_W[key]
    return PowerModel(tdp, tdp * IDLE_FRACTION, host_per_gpu_w(key) * gpus_per_node)


def gpu_power(model: PowerModel, busy: float) -> float:
    """Watts of one GPU computing a ``busy`` fraction of the time."""
    if not 0 <= busy <= 1:
        raise ConfigError(f"busy fraction: {busy} is not accepted; accepted: 0 to 1")
    return model.idle_w + (model.busy_w - model.idle_w) * busy


@dataclass(frozen=True)
class Energy:
    """IT and facility energy (joules) and cost (None without a price)."""

    it_j: float
    facility_j: float
    cost: float | None

    @property
    def mwh(self) -> float:
        """Facility energy in MWh."""
        return self.facility_j / JOULES_PER_MWH


def run_energy(model: PowerModel, gpus: int, nodes: int, training_s: float, waiting_s: float,
               busy: float, pue: float = DEFAULT_PUE,
               gpu_hour_price: float | None = None) -> Energy:
    """Energy of ``training_s`` seconds computing at ``busy`` and ``waiting_s`` seconds of the
    whole job stopped (checkpoint saves, restarts: GPUs idle), hosts always on; cost = GPU-hours
    of the wall time times ``gpu_hour_price``."""
    if not pue >= 1:
        raise ConfigError(f"{pue} is not accepted; accepted: a number >= 1", "pue")
    if gpu_hour_price is not None and not gpu_hour_price >= 0:
        raise ConfigError(f"{gpu_hour_price} is not accepted; accepted: a number >= 0",
                          "gpu_hour_price")
    wall = training_s + waiting_s
    it = (gpus * (gpu_power(model, busy) * training_s + model.idle_w * waiting_s)
          + nodes * model.host_w * wall)
    cost = None if gpu_hour_price is None else gpus * wall / 3600.0 * gpu_hour_price
    return Energy(it, it * pue, cost)
