"""Energy (joules, reported in MWh) and cost of a training run.

**GPU power** at busy fraction ``b`` (the share of the iteration a GPU computes: the plan's
iteration minus its exposed communication): ``idle + (TDP - idle) b``. TDPs, the datasheets'
maximum board power: V100 SXM2 300 W, A100 SXM 400 W, H100 SXM 700 W, H200 SXM 700 W, B200
1000 W. Idle: 12.8% of TDP, from the Llama 3 report's observation that the whole 16,384-GPU job
stopping at once (e.g. every GPU waiting on a checkpoint) swings the data centre's power "on the
order of tens of megawatts" (The Llama 3 Herd of Models, Sec. 3.3.4): at least 10 MW over
16,384 GPUs is 610 W of an H100's 700 W, an idle draw of at most 90 W; we take that bound.

**Node overhead** (CPUs, memory, NICs, fans): Latif et al., "Empirical Measurements of AI
Training Power Demand on a GPU-Accelerated Node" (IEEE Access 13, 2025), measured at most 8.4 kW
on an 8-GPU H100 HGX node training at near full utilization, 82% of its 10.2 kW rating. We take
each node type's rated maximum times that 8.4/10.2, less its GPUs at TDP, as its host draw
(H100: 2.8 kW), at all times. **Facility**: times the power usage effectiveness ``pue``
(default 1.10: Google's fleet-wide trailing-twelve-month PUE, 2023, google.com/about/
datacenters/efficiency).
"""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.errors import ConfigError

TDP_W = {"v100": 300.0, "a100": 400.0, "h100": 700.0, "h200": 700.0, "b200": 1000.0}
NODE_RATED_W = {  # datasheet maximum system power of the 8-GPU node
    "v100": 3500.0,   # DGX-1 with V100
    "a100": 6500.0,   # DGX A100
    "h100": 10200.0,  # DGX H100
    "h200": 10200.0,  # DGX H200
    "b200": 14300.0,  # DGX B200
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


def power_model(gpu: str, gpus_per_node: int = 8) -> PowerModel:
    """The GPU preset's power (module docstring); ConfigError for a GPU without a TDP."""
    key = gpu.lower()
    if key not in TDP_W:
        raise ConfigError(f"gpu: {gpu!r} has no power figures; accepted: " + ", ".join(TDP_W))
    tdp = TDP_W[key]
    host = NODE_RATED_W[key] * MEASURED_OVER_RATED - 8 * tdp
    return PowerModel(tdp, tdp * IDLE_FRACTION, host * gpus_per_node / 8)


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
