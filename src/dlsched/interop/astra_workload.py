"""ASTRA-sim 1.0 text workloads <-> ``AstraWorkload`` (plain frozen dataclasses).

Format (whitespace separated; one layer per line)::

    DATA                                   <- parallelism, then optional "key: value" options
    2                                      <- number of layers
    conv1 -1 1200 NONE 0 1100 NONE 0 1500 ALLREDUCE 18816 10
    fc    -1  300 NONE 0  280 NONE 0  310 ALLREDUCE 4096000 40

Each layer line: name, a reserved/dependency integer (-1), forward compute, forward comm type,
forward comm size, input-gradient compute, its comm type and size, weight-gradient compute,
its comm type and size, and the update delay after the weight-gradient collective. With
``HYBRID_CUSTOMIZED`` each line ends with the layer's own parallelism. Comm types: NONE,
ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL; sizes in bytes.

Time unit: ASTRA-sim counts compute and update times in cycles of its event clock, and every
network backend it ships advances that clock in nanoseconds, so one cycle is 1 ns (its outputs
say "cycles" for ns). dlsched converts with ``cycle_s`` seconds per cycle, 1e-9 by default;
pass another value when the numbers are accelerator cycles at a known clock (e.g. 1/1.4e9).

Header options: ``model_parallel_NPU_group: N`` (HYBRID_TRANSFORMER*), ``DLRM_LAST_BOTTOM_LAYER:
N`` or a bare integer after HYBRID_DLRM (the last bottom-MLP layer), ``checkpoints: n l1 .. ln``
and ``checkpoint_initiates: n l1 .. ln`` (HYBRID_TRANSFORMER_FWD_IN_BCKWD: activation
checkpoints, and the layers whose backward first recomputes the forward from the nearest
checkpoint at or before them, as ASTRA-sim 1.0's training loop does), and any other
``key: value``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from dlsched.collectives.plan import CollectiveOp
from dlsched.errors import ConfigError
from dlsched.interop.source import file_error, read_text
from dlsched.validation import DATA_SIZE, DURATION, MAX_LAYERS

DEFAULT_CYCLE_S = 1e-9
DLRM_BOTTOM_KEY = "DLRM_LAST_BOTTOM_LAYER"
MODEL_GROUP_KEY = "model_parallel_NPU_group"
CHECKPOINTS_KEY = "checkpoints"
INITIATES_KEY = "checkpoint_initiates"
# Header options whose value is a count followed by that many layer indices.
LIST_KEYS = (CHECKPOINTS_KEY, INITIATES_KEY)


class AstraParallelism(StrEnum):
    """The training loop's parallelization (first line of the workload)."""

    DATA = "DATA"
    MODEL = "MODEL"
    HYBRID_DATA_MODEL = "HYBRID_DATA_MODEL"
    HYBRID_MODEL_DATA = "HYBRID_MODEL_DATA"
    HYBRID_CUSTOMIZED = "HYBRID_CUSTOMIZED"
    HYBRID_TRANSFORMER = "HYBRID_TRANSFORMER"
    HYBRID_TRANSFORMER_FWD_IN_BCKWD = "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
    HYBRID_DLRM = "HYBRID_DLRM"
    HYBRID_DLRM_ENHANCED = "HYBRID_DLRM_ENHANCED"
    MICRO = "MICRO"


class AstraCommOp(StrEnum):
    """Communication type of one layer phase."""

    NONE = "NONE"
    ALLREDUCE = "ALLREDUCE"
    ALLGATHER = "ALLGATHER"
    REDUCESCATTER = "REDUCESCATTER"
    ALLTOALL = "ALLTOALL"

    @property
    def collective(self) -> CollectiveOp | None:
        """The dlsched collective, None for NONE."""
        return {AstraCommOp.ALLREDUCE: CollectiveOp.ALL_REDUCE,
                AstraCommOp.ALLGATHER: CollectiveOp.ALL_GATHER,
                AstraCommOp.REDUCESCATTER: CollectiveOp.REDUCE_SCATTER,
                AstraCommOp.ALLTOALL: CollectiveOp.ALL_TO_ALL}.get(self)


@dataclass(frozen=True)
class AstraComm:
    """A layer phase's collective: type and size in bytes per NPU (0 with NONE)."""

    op: AstraCommOp
    num_bytes: int


@dataclass(frozen=True)
class AstraLayer:
    """One layer line; times in seconds, sizes in bytes. ``parallelism`` is the layer's own
    (HYBRID_CUSTOMIZED only), ``reserved`` the second column (-1 in ASTRA-sim's examples)."""

    name: str
    forward_compute_s: float
    forward_comm: AstraComm
    input_grad_compute_s: float
    input_grad_comm: AstraComm
    weight_grad_compute_s: float
    weight_grad_comm: AstraComm
    update_s: float
    reserved: int = -1
    parallelism: AstraParallelism | None = None


@dataclass(frozen=True)
class AstraWorkload:
    """A whole ASTRA-sim 1.0 text workload; ``options`` are the header's (key, value) pairs and
    ``cycle_s`` the seconds per cycle used to convert its times."""

    parallelism: AstraParallelism
    layers: tuple[AstraLayer, ...]
    options: tuple[tuple[str, str], ...] = ()
    cycle_s: float = DEFAULT_CYCLE_S

    def option(self, key: str) -> str | None:
        """A header option's value, None if absent."""
        return dict(self.options).get(key)

    @property
    def model_parallel_npus(self) -> int | None:
        """``model_parallel_NPU_group`` (NPUs of one model-parallel group), None if absent."""
        value = self.option(MODEL_GROUP_KEY)
        return None if value is None else int(value)

    def layer_list(self, key: str) -> tuple[int, ...]:
        """The layer indices of a list option (``checkpoints``, ``checkpoint_initiates``)."""
        value = self.option(key)
        return () if value is None else tuple(int(v) for v in value.split()[1:])

    def recompute_ranges(self) -> tuple[tuple[int, int], ...]:
        """(checkpoint, initiator) per layer of ``checkpoint_initiates``: before the backward
        of the initiator, the forward of layers checkpoint .. initiator - 1 is recomputed
        (the nearest checkpoint at or before the initiator; ASTRA-sim 1.0's
        ``Forward_In_BackPass``)."""
        checkpoints = sorted(self.layer_list(CHECKPOINTS_KEY))
        return tuple((max(c for c in checkpoints if c <= initiator), initiator)
                     for initiator in self.layer_list(INITIATES_KEY))

    @property
    def dlrm_last_bottom_layer(self) -> int | None:
        """Index of DLRM's last bottom-MLP layer, None if absent."""
        value = self.option(DLRM_BOTTOM_KEY)
        return None if value is None else int(value)

    def layer_parallelism(self, index: int) -> AstraParallelism:
        """The parallelism layer ``index`` runs under (its own with HYBRID_CUSTOMIZED)."""
        return self.layers[index].parallelism or self.parallelism


PHASES = ("forward", "input_grad", "weight_grad")


def comm_dimensions(parallelism: AstraParallelism, phase: str, dim_sizes: tuple[int, ...],
                    model_parallel_npus: int | None = None) -> tuple[bool, ...]:
    """Which network dimensions a phase's collective spans, as ASTRA-sim 1.0 assigns them.

    DATA/MICRO and DLRM's MLPs: weight gradients on every dimension (DLRM's embedding
    All-to-All in forward/input-gradient also spans every dimension); MODEL: forward and
    input gradients on every dimension; HYBRID_DATA_MODEL: model parallel on dimension 1, data
    parallel on the rest; HYBRID_MODEL_DATA: the reverse; HYBRID_TRANSFORMER*: model parallel
    on the first dimensions holding ``model_parallel_npus`` NPUs, data parallel on the rest.
    ``phase`` is one of ``forward``, ``input_grad``, ``weight_grad``.
    """
    if phase not in PHASES:
        raise ConfigError(f"phase: unknown {phase!r}; accepted: {', '.join(PHASES)}")
    num = len(dim_sizes)
    data_phase = phase == "weight_grad"
    P = AstraParallelism
    if parallelism in (P.DATA, P.MICRO, P.HYBRID_DLRM, P.HYBRID_DLRM_ENHANCED):
        model = (not data_phase and parallelism in (P.HYBRID_DLRM, P.HYBRID_DLRM_ENHANCED),) * num
        return (True,) * num if data_phase else model
    if parallelism is P.MODEL:
        return (not data_phase,) * num
    if parallelism in (P.HYBRID_DATA_MODEL, P.HYBRID_MODEL_DATA):
        first_is_model = parallelism is P.HYBRID_DATA_MODEL
        model = (first_is_model,) + (not first_is_model,) * (num - 1)
        return tuple(m != data_phase for m in model)
    if parallelism in (P.HYBRID_TRANSFORMER, P.HYBRID_TRANSFORMER_FWD_IN_BCKWD):
        if model_parallel_npus is None:
            raise ConfigError(f"{MODEL_GROUP_KEY}: needed by {parallelism.value}")
        products = [math.prod(dim_sizes[:i + 1]) for i in range(num)]
        if model_parallel_npus not in products:
            raise ConfigError(f"{MODEL_GROUP_KEY}: {model_parallel_npus} NPUs is not the "
                              f"product of the first dimensions' sizes {list(dim_sizes)}; "
                              f"accepted: {products}")
        boundary = products.index(model_parallel_npus) + 1
        model = (True,) * boundary + (False,) * (num - boundary)
        return tuple(m != data_phase for m in model)
    raise ConfigError(f"parallelism: {parallelism.value} has no fixed dimensions; use each "
                      "layer's own parallelism (HYBRID_CUSTOMIZED)")


def _header(tokens: list[str], path: Path) -> tuple[AstraParallelism, list[tuple[str, str]]]:
    if not tokens:
        raise file_error(path, 1, "parallelism", "empty first line; accepted: "
                         + ", ".join(p.value for p in AstraParallelism))
    try:
        parallelism = AstraParallelism(tokens[0])
    except ValueError:
        raise file_error(path, 1, "parallelism", f"unknown value {tokens[0]!r}; accepted: "
                         + ", ".join(p.value for p in AstraParallelism)) from None
    options: list[tuple[str, str]] = []
    rest = tokens[1:]
    dlrm = parallelism in (AstraParallelism.HYBRID_DLRM, AstraParallelism.HYBRID_DLRM_ENHANCED)
    if dlrm and rest and rest[0].lstrip("-").isdigit():
        options.append((DLRM_BOTTOM_KEY, rest.pop(0)))
    while rest:
        key = rest.pop(0)
        if not key.endswith(":") or not rest:
            raise file_error(path, 1, "options", f"expected 'key: value' pairs after the "
                             f"parallelism (got {key!r})")
        if key[:-1] in LIST_KEYS:
            options.append((key[:-1], _layer_list(key[:-1], rest, path)))
        else:
            options.append((key[:-1], rest.pop(0)))
    for key in (DLRM_BOTTOM_KEY, MODEL_GROUP_KEY):
        value = dict(options).get(key)
        if value is not None and not value.isdigit():
            raise file_error(path, 1, key, f"must be a non-negative integer (got {value!r})")
    return parallelism, options


def _layer_list(key: str, rest: list[str], path: Path) -> str:
    """Consume ``n l1 .. ln`` from ``rest``; the option's text (``"n l1 .. ln"``)."""
    count = rest.pop(0)
    wanted = int(count) if count.isdigit() else -1
    if wanted < 0 or len(rest) < wanted or not all(v.isdigit() for v in rest[:wanted]):
        raise file_error(path, 1, key, "expected a count and that many layer indices (got "
                         f"{' '.join([count, *rest[:max(wanted, 0)]])!r})")
    values = [rest.pop(0) for _ in range(wanted)]
    return " ".join([count, *values])


def _check_checkpoints(workload: AstraWorkload, path: Path) -> None:
    """Checkpoint options name existing layers, only with HYBRID_TRANSFORMER_FWD_IN_BCKWD,
    and every initiator has a checkpoint at or before it."""
    keys = [key for key in LIST_KEYS if workload.option(key) is not None]
    if not keys:
        return
    if workload.parallelism is not AstraParallelism.HYBRID_TRANSFORMER_FWD_IN_BCKWD:
        raise file_error(path, 1, keys[0], "only read with HYBRID_TRANSFORMER_FWD_IN_BCKWD "
                         f"(got {workload.parallelism.value})")
    for key in keys:
        bad = [v for v in workload.layer_list(key) if v >= len(workload.layers)]
        if bad:
            raise file_error(path, 1, key, f"layers {bad} do not exist; accepted: 0.."
                             f"{len(workload.layers) - 1}")
    checkpoints = workload.layer_list(CHECKPOINTS_KEY)
    orphans = [i for i in workload.layer_list(INITIATES_KEY)
               if not any(c <= i for c in checkpoints)]
    if orphans:
        raise file_error(path, 1, INITIATES_KEY, f"layers {orphans} have no checkpoint at or "
                         f"before them (checkpoints: {list(checkpoints)})")


def _cycles(token: str, path: Path, line: int, field: str, cycle_s: float) -> float:
    try:
        value = float(token)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or value * cycle_s > DURATION.high:
        raise file_error(path, line, field, f"must be a finite number of cycles >= 0 and at "
                         f"most {DURATION.high:g} s (got {token!r})")
    return value * cycle_s


def _comm(kind: str, size: str, path: Path, line: int, field: str) -> AstraComm:
    try:
        op = AstraCommOp(kind)
    except ValueError:
        raise file_error(path, line, f"{field} comm type", f"unknown value {kind!r}; accepted: "
                         + ", ".join(o.value for o in AstraCommOp)) from None
    if not size.isdigit() or int(size) > DATA_SIZE.high:
        raise file_error(path, line, f"{field} comm size", f"must be an integer number of "
                         f"bytes >= 0 and <= {DATA_SIZE.high:g} (got {size!r})")
    return AstraComm(op, int(size))


LAYER_FIELDS = ("name", "reserved", "forward compute", "forward comm type", "forward comm size",
                "input-grad compute", "input-grad comm type", "input-grad comm size",
                "weight-grad compute", "weight-grad comm type", "weight-grad comm size",
                "update time")


def _layer(tokens: list[str], path: Path, line: int, customized: bool,
           cycle_s: float) -> AstraLayer:
    expected = len(LAYER_FIELDS) + customized
    if len(tokens) < expected:
        missing = [*LAYER_FIELDS, "layer parallelism"][len(tokens)]
        raise file_error(path, line, missing, f"missing: a layer line has {expected} fields "
                         f"(got {len(tokens)})")
    if len(tokens) > expected:
        raise file_error(path, line, "layer", f"{len(tokens)} fields, expected {expected}: "
                         + ", ".join(LAYER_FIELDS))
    if not tokens[1].lstrip("-").isdigit():
        raise file_error(path, line, "reserved", f"must be an integer (got {tokens[1]!r})")
    parallelism = None
    if customized:
        try:
            parallelism = AstraParallelism(tokens[12])
        except ValueError:
            raise file_error(path, line, "layer parallelism", f"unknown value {tokens[12]!r}; "
                             "accepted: " + ", ".join(p.value for p in AstraParallelism)) \
                from None
    return AstraLayer(
        name=tokens[0],
        forward_compute_s=_cycles(tokens[2], path, line, "forward compute", cycle_s),
        forward_comm=_comm(tokens[3], tokens[4], path, line, "forward"),
        input_grad_compute_s=_cycles(tokens[5], path, line, "input-grad compute", cycle_s),
        input_grad_comm=_comm(tokens[6], tokens[7], path, line, "input-grad"),
        weight_grad_compute_s=_cycles(tokens[8], path, line, "weight-grad compute", cycle_s),
        weight_grad_comm=_comm(tokens[9], tokens[10], path, line, "weight-grad"),
        update_s=_cycles(tokens[11], path, line, "update time", cycle_s),
        reserved=int(tokens[1]), parallelism=parallelism,
    )


def parse_astra_workload(text: str, path: str | Path = "<workload>",
                         cycle_s: float = DEFAULT_CYCLE_S) -> AstraWorkload:
    """The AstraWorkload of an ASTRA-sim 1.0 text workload; ConfigError naming file, line and
    field. Times are converted with ``cycle_s`` seconds per cycle."""
    path = Path(path)
    if not (math.isfinite(cycle_s) and cycle_s > 0):
        raise file_error(path, None, "cycle_s", f"must be a finite number of seconds > 0 "
                         f"(got {cycle_s!r})")
    lines = [(number, line.split()) for number, line in enumerate(text.splitlines(), start=1)]
    parallelism, options = _header(lines[0][1] if lines else [], path)
    body = [(number, tokens) for number, tokens in lines[1:] if tokens]
    if not body or len(body[0][1]) != 1 or not body[0][1][0].isdigit():
        line = body[0][0] if body else 2
        raise file_error(path, line, "layer count", "the second line must be the number of "
                         "layers (a non-negative integer)")
    count_line, count = body[0][0], int(body[0][1][0])
    if count > MAX_LAYERS:
        raise file_error(path, count_line, "layer count", f"{count} layers; accepted: at most "
                         f"{MAX_LAYERS}")
    layer_lines = body[1:]
    if len(layer_lines) != count:
        raise file_error(path, count_line, "layer count", f"says {count} layers but the file "
                         f"has {len(layer_lines)} layer lines")
    customized = parallelism is AstraParallelism.HYBRID_CUSTOMIZED
    layers = tuple(_layer(tokens, path, number, customized, cycle_s)
                   for number, tokens in layer_lines)
    workload = AstraWorkload(parallelism, layers, tuple(options), cycle_s)
    _check_checkpoints(workload, path)
    return workload


def read_astra_workload(path: str | Path, cycle_s: float = DEFAULT_CYCLE_S) -> AstraWorkload:
    """Read an ASTRA-sim 1.0 text workload file (times converted with ``cycle_s``)."""
    return parse_astra_workload(read_text(path, "astra-workload"), path, cycle_s)


def _cycles_text(seconds: float, cycle_s: float) -> str:
    cycles = seconds / cycle_s
    return str(round(cycles)) if abs(cycles - round(cycles)) < 1e-6 * max(1.0, cycles) \
        else repr(cycles)


def format_astra_workload(workload: AstraWorkload) -> str:
    """The text of ``workload`` in ASTRA-sim 1.0 format (inverse of ``parse_astra_workload``)."""
    header = [workload.parallelism.value]
    for key, value in workload.options:
        header += [value] if key == DLRM_BOTTOM_KEY and len(header) == 1 else [f"{key}:", value]
    rows = ["\t".join(header), str(len(workload.layers))]
    for layer in workload.layers:
        fields = [layer.name, str(layer.reserved)]
        for compute, comm in ((layer.forward_compute_s, layer.forward_comm),
                              (layer.input_grad_compute_s, layer.input_grad_comm),
                              (layer.weight_grad_compute_s, layer.weight_grad_comm)):
            fields += [_cycles_text(compute, workload.cycle_s), comm.op.value,
                       str(comm.num_bytes)]
        fields.append(_cycles_text(layer.update_s, workload.cycle_s))
        if layer.parallelism is not None:
            fields.append(layer.parallelism.value)
        rows.append("\t".join(fields))
    return "\n".join(rows) + "\n"


def write_astra_workload(workload: AstraWorkload, path: str | Path) -> None:
    """Write ``workload`` as an ASTRA-sim 1.0 text workload file."""
    Path(path).write_text(format_astra_workload(workload), encoding="utf-8")
