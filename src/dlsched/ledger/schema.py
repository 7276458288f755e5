"""The schema of a ledger row: one published, measured training run.

A row holds the run's configuration exactly as its source publishes it and the values measured,
each in the unit the source prints (``Measurement.si`` converts to dlsched's internal units:
seconds, FLOP/s, bytes). A configuration field the source does not state is ``None`` and named in
``unpublished``; a field worked out from other published facts (not stated outright) is named in
``inferred`` with the derivation. Nothing is guessed: a row that would need a guess is left out
of the data file, and the file's header says which and why.

How the parallel degrees compose: ``tp * pp * dp * cp == gpus`` over the whole job. Expert
parallelism (``ep``) does not multiply into that product: as in Megatron-LM it divides the
data-parallel group within the expert layers (``dp * cp`` must be a multiple of ``ep``), the
dense layers keep ``dp``. ZeRO / FSDP shard over the data-parallel group (``dp``), so
``zero`` does not change the product either. A row with ``cp > 1`` names its
``cp_algorithm`` (or lists it in ``unpublished``); a mixture-of-experts row (``experts``) names
how its router's load was balanced (``router_balance``, or lists it in ``unpublished``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    model_validator,
)

from dlsched.errors import ConfigError
from dlsched.inputs import choice
from dlsched.job.cluster import NODE_PRESETS, System, node_cluster
from dlsched.job.compute.module_recompute import modules_recompute
from dlsched.job.evaluation.pipeline_layout import PREFIX as LAYOUT_PREFIX
from dlsched.job.execution import LAYOUT_FIELDS, Execution
from dlsched.job.model_spec import Model
from dlsched.job.run_choices import RUN_CHOICES
from dlsched.job.run_settings import RunSettings, run_settings_of

Source = Literal["sc21", "korthikanti", "megatron-h100", "torchtitan", "megatron-bridge",
                 "dgxc", "megatron-bridge-moe"]
Gpu = Literal["a100-80gb", "h100-sxm", "h100-hbm2e-96gb", "h200", "h800", "b200", "gb200",
              "b300", "gb300", "mi300x"]
Metric = Literal["iteration_s", "tflops_per_gpu", "model_tflops_per_gpu", "mfu", "hfu",
                 "tokens_per_s_per_gpu", "memory_gib_per_gpu"]
Overlap = Literal["dp_grad_reduce", "dp_param_gather", "tp_comm", "async_tp", "pp_p2p", "ep_a2a"]

# Each overlap a row lists and the run setting (``job.run_settings``) it turns on (``ep_a2a``:
# Megatron-Core's EP overlap, ``job.evaluation.a2a_overlap``). A row without ``pp_p2p`` ran its
# pipeline transfers blocking (``NOT_OVERLAPPED``: the other settings' defaults are the runs'
# without the overlap: DDP's reduction after the last backward, no gathers or TP collectives
# overlapped).
OVERLAP_SETTINGS: dict[str, tuple[str, object]] = {
    "dp_grad_reduce": ("dp_policy", "ddp"),
    "dp_param_gather": ("overlap_param_gather", True),
    "tp_comm": ("tp_comm_overlap", True),
    "async_tp": ("async_tp", True),
    "pp_p2p": ("pipeline_p2p", "overlapped"),
    "ep_a2a": ("moe_a2a_overlap", True),
}
NOT_OVERLAPPED: dict[str, object] = {"pipeline_p2p": "blocking"}

# Each metric's published unit and its factor to dlsched's internal unit (units.py: seconds,
# FLOP/s, bytes; utilizations as fractions, tokens/s as they are).
METRIC_UNITS: dict[str, tuple[str, str, float]] = {
    "iteration_s": ("s", "s", 1.0),
    "tflops_per_gpu": ("TFLOP/s per GPU", "FLOP/s per GPU", 1e12),
    "model_tflops_per_gpu": ("model TFLOP/s per GPU", "FLOP/s per GPU", 1e12),
    "mfu": ("fraction of peak", "fraction of peak", 1.0),
    "hfu": ("fraction of peak", "fraction of peak", 1.0),
    "tokens_per_s_per_gpu": ("tokens/s per GPU", "tokens/s per GPU", 1.0),
    "memory_gib_per_gpu": ("GiB per GPU", "B per GPU", float(2**30)),
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Ledger GPU -> (node preset, compute preset): one preset per GPU model, the model the preset
# describes (presets/gpus.yaml).
GPU_PRESETS: dict[str, tuple[str, str]] = {
    "a100-80gb": ("dgx-a100", "a100"),
    "h100-sxm": ("dgx-h100", "h100"),
    "h100-hbm2e-96gb": ("grand-teton-h100", "h100-hbm2e-96gb"),
    "h200": ("dgx-h200", "h200"),
    "h800": ("dgx-h800", "h800"),
    "b200": ("dgx-b200", "b200"),
    "gb200": ("gb200-nvl72", "gb200"),
    "b300": ("dgx-b300", "b300"),
    "gb300": ("gb300-nvl72", "gb300"),
    "mi300x": ("mi300x-8", "mi300x"),
}
# Ledger GPUs with no preset of their own, and why another's does not describe them (none
# today: every ledger GPU has its preset; presets/gpus.yaml says how each constant was got).
NO_PRESET: dict[str, str] = {}


class Hardware(_Strict):
    """The machines: GPU model and count, and what is known of the cluster and its network.
    ``nvlink_domain``: GPUs the job occupies in each NVLink domain when it uses only part of
    each (a Slurm ``--segment`` on GB200 NVL72 racks: 64 of 72); None: whole domains, the node
    preset's (``job.cluster.node_cluster``'s ``domain``)."""

    gpu: Gpu
    gpus: int = Field(gt=0)
    cluster: str
    gpus_per_node: int = Field(gt=0)
    intra_node: str | None = None
    inter_node_gbps_per_gpu: float | None = Field(default=None, gt=0)
    gpu_power_w: float | None = Field(default=None, gt=0)
    nvlink_domain: int | None = Field(default=None, gt=0)

    def system(self) -> System:
        """What the run ran on as the evaluator's one system type (``job.cluster.System``):
        the node preset of ``gpu`` with its compute preset (``GPU_PRESETS``: one preset per GPU
        model, no per-row factor) scaled to ``gpus``, ``nvlink_domain`` GPUs of each domain
        (None: whole domains). ConfigError naming the field when no preset describes the GPU
        or the published NIC rate differs from the preset's."""
        if self.gpu not in GPU_PRESETS:
            why = f" ({NO_PRESET[self.gpu]})" if self.gpu in NO_PRESET else ""
            raise ConfigError(f"hardware.gpu: no dlsched preset for {self.gpu}{why}; "
                              "accepted: " + ", ".join(GPU_PRESETS))
        node, gpu = GPU_PRESETS[self.gpu]
        nic_gbps = float(NODE_PRESETS[node].nic.bandwidth) * 8 / 1e9
        if self.inter_node_gbps_per_gpu is not None and self.gpus > self.gpus_per_node and \
                abs(self.inter_node_gbps_per_gpu / nic_gbps - 1) > 0.01:
            raise ConfigError(f"hardware.inter_node_gbps_per_gpu: "
                              f"{self.inter_node_gbps_per_gpu:g} Gb/s differs from the {node} "
                              f"preset's {nic_gbps:g} Gb/s per GPU")
        return node_cluster(node, self.gpus, gpu, self.nvlink_domain)


# A row's ``model`` section is a model file (``job.model_spec.Model``, the one model type: its
# fields and meanings, ``norm`` / ``position_embedding`` in the sources' spelling) that reaches
# the evaluator as it is. Beyond a model file's rules, a ledger row states what a file may leave
# to its defaults (nothing is guessed): the fields of ``PUBLISHED`` (each under either spelling,
# ``position_embedding`` null when unpublished and then named in ``unpublished``), ``top_k``
# with ``experts``, and no MoE field on a dense model (``MOE_ONLY``).
PUBLISHED: tuple[tuple[str, ...], ...] = (
    ("name",), ("layers",), ("hidden",), ("ffn_hidden",), ("heads",), ("kv_heads",), ("vocab",),
    ("seq",), ("tied_embeddings",), ("gated_ffn",), ("bias",), ("norm", "rms_norm"),
    ("position_embedding", "learned_positions"), ("params_published",))
MOE_ONLY = ("capacity_factor", "router_balance", "expert_ffn_hidden", "shared_experts",
            "moe_layer_freq", "router", "first_k_dense", "moe_layer_offset", "router_groups")


def check_model_section(section: dict[str, Any]) -> None:
    """ValueError naming what a row's ``model`` section leaves unstated (``PUBLISHED``), a
    dense model's MoE field or ``experts`` without ``top_k`` (module comment above)."""
    missing = [names[0] for names in PUBLISHED if not any(n in section for n in names)]
    if missing:
        raise ValueError(f"model: not stated: {', '.join(missing)} (a field the source does "
                         "not publish is null and named in unpublished)")
    zeros = [name for name in ("ffn_hidden", "kv_heads") if section[name] == 0]
    if zeros:
        raise ValueError(f"model: {', '.join(zeros)} must be stated (> 0), not left to "
                         "the default")
    moe = bool(section.get("experts"))
    if (moe and "top_k" not in section) or (not moe and section.get("top_k", 2) != 2):
        raise ValueError("experts and top_k go together")


def check_dense(model: Model) -> None:
    """ValueError when a dense model (``experts`` 0) sets a field of ``MOE_ONLY``."""
    defaults = {name: Model.model_fields[name].default for name in MOE_ONLY}
    if not model.experts and any(getattr(model, name) != defaults[name] for name in MOE_ONLY):
        raise ValueError("capacity_factor, router_balance, expert_ffn_hidden, "
                         "shared_experts, moe_layer_freq, router, first_k_dense, "
                         "moe_layer_offset and router_groups are for MoE models only")


class Parallelism(_Strict):
    """How the run is split and scheduled. ``chunks``: model chunks (virtual pipeline stages)
    per pipeline rank, 1 without interleaving; ``microbatch_size`` in sequences;
    ``global_batch`` in sequences per iteration; ``zero``: 0-3 (Megatron's distributed
    optimizer is 1), ``fsdp`` (PyTorch FSDP2, parameters, gradients and optimizer state
    sharded: ZeRO-3's layout). ``recompute``: ``selective`` is Megatron-LM's (the attention
    core recomputed, Korthikanti et al. 2022), ``selective-op`` TorchTitan's per-op policy
    (every other matmul's output saved with the attention's and the reduce-scatters', the rest
    recomputed), ``modules`` Megatron-Core's ``--recompute-modules`` list
    (``recompute_modules``: e.g. ``layernorm``, ``moe_act``, ``mla_up_proj``; only with
    ``modules``), ``block`` its ``--recompute-method block`` (``recompute_num_layers``: the
    first N layers of each model chunk; only with ``block``). ``attention``: the run's
    attention core, as the source's code runs it, by Megatron-Core's ``--attention-backend``
    names: ``unfused`` (Megatron-LM's 2021 core: scores,
    softmax, dropout, context as separate ops), ``flash`` (one fused kernel, FlashAttention-2:
    PyTorch SDPA's flash backend, the flash-attn package) or ``fused`` (Transformer Engine's
    cuDNN fused attention, which Transformer Engine prefers on Hopper when both are enabled).
    ``cp_algorithm`` (only with ``cp > 1``): ``ring`` (K/V blocks passed around the CP ring,
    Megatron-Core / Transformer Engine's ``p2p``), ``all-to-all`` (DeepSpeed-Ulysses: heads
    re-sharded by All-to-All, TE's ``a2a``) or ``all-gather`` (every K/V shard all-gathered,
    PyTorch's experimental context parallel with its ``allgather`` rotate method).
    ``expert_tp``: the MoE layers' tensor-parallel degree when it differs from ``tp``
    (Megatron-Core's ``--expert-tensor-parallel-size``, MoE parallel folding); None: ``tp``,
    Megatron-Core's default. ``pipeline_split``: how the layers fill the ``pp x chunks`` virtual
    stages (``job.pipeline_split``): ``even`` (Megatron-Core's default), or the embedding and/or
    the loss counted as a layer (``--account-for-embedding-in-pipeline-split``,
    ``--account-for-loss-in-pipeline-split``), the first/last stage one layer fewer, or
    ``layout``: Megatron-Core's ``--pipeline-model-parallel-layout`` string in
    ``pipeline_layout`` (only with ``layout``; ``job.evaluation.pipeline_layout``).
    ``grad_reduce``: the gradients' format as reduced (``fp32``: Megatron-LM's default main
    gradients, FSDP2's float32 reduce; ``bf16``: Megatron-Core's ``grad_reduce_in_fp32=False``,
    ``--grad-reduce-in-bf16``; ``fp16``: fp16 training without
    ``--accumulate-allreduce-grads-in-fp32``). ``grad_accumulation``: how gradients add up over
    microbatches (``job.grad_accumulation``): ``fused`` into the weight-gradient GEMMs
    (Megatron-LM since 2022 with FP32 main gradients, Megatron-Core) or ``separate`` (an add
    per parameter after each microbatch's backward: Megatron-LM before 2022, and with 16-bit
    main gradients after). ``fp8_recipe`` (with ``precision`` fp8): how the linear layers run
    in FP8 (``job.compute.fp8``: Transformer Engine's ``delayed``, ``current``, ``mxfp8``, and
    ``nvfp4``, its NVFP4 recipe, GEMMs in FP4: ``job.compute.nvfp4``; torchao's
    ``tensorwise``, ``rowwise``, ``rowwise_with_gw_hp``); ``fp8_all_gather``: FSDP
    gathers the weights in FP8 (torchao's ``enable_fsdp_float8_all_gather``);
    ``fp8_param_gather``: Megatron-Core's FP8 primary weights (``--fp8-param-gather``,
    ``job.memory.fp8_weights``); ``moe_probs_in_activation``: Megatron-Core >= 0.13's MoE
    layers weight the routing probabilities in the experts' activation
    (``job.memory.moe``); ``expandable_segments``: the run's launch set
    ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (no fragmentation:
    ``job.memory.allocator.fragmentation_margin``, ``ledger.memory``). ``overlap``
    ``ep_a2a``: the MoE layers' expert-parallel All-to-Alls overlapped with another
    microbatch's compute (Megatron-Core's ``--overlap-moe-expert-parallel-comm`` with
    ``--delay-wgrad-compute``). ``cross_entropy``:
    how the head's loss runs (``job.compute.cross_entropy``): ``unfused`` (Megatron-LM's
    vocab-parallel cross-entropy, Megatron-Core's default), or Megatron-Core's
    ``cross_entropy_loss_fusion`` with ``cross_entropy_fusion_impl`` ``native`` (its
    torch.compile'd functions) or ``te`` (Transformer Engine's Triton kernels).
    ``transformer_impl``: the layers' norms as Megatron-Core's ``--transformer-impl`` runs them
    (``job.compute.transformer_impl``): ``local`` (apex's fused layer norm, Megatron-LM's and
    Megatron-Core's local spec) or ``transformer_engine`` (Transformer Engine's kernels).
    ``moe_dispatcher``: the MoE token dispatch (``job.communication.moe_dispatch``):
    ``alltoall`` (Megatron-Core's ``--moe-token-dispatcher-type alltoall``, NCCL's All-to-All
    of every routed copy), or the ``flex`` dispatcher with ``deepep`` (DeepEP) or
    ``hybridep`` (``--moe-flex-dispatcher-backend hybridep``). ``cuda_graph``: what Transformer
    Engine's CUDA graphs capture (Megatron-Bridge's ``cuda_graph_scope``; ``none``, ``moe`` for
    ``[moe_router, moe_preprocess]``, ``attn+moe``, ``full`` for a full iteration), the MoE
    layers' captured launches costing the host one graph launch (``job.compute.moe_host``).
    ``master_weights``: False when Adam updated the 16-bit weights in place, no FP32 master
    copy (``job.communication.dp_sync``; vTrain's runs)."""

    tp: int = Field(gt=0)
    pp: int = Field(gt=0)
    dp: int = Field(gt=0)
    cp: int = Field(default=1, gt=0)
    ep: int = Field(default=1, gt=0)
    cp_algorithm: Literal["ring", "all-to-all", "all-gather"] | None = None
    expert_tp: int | None = Field(default=None, gt=0)
    pipeline_split: Literal["even", "account-embedding", "account-loss",
                            "account-embedding-loss", "layout"] = "even"
    pipeline_layout: str | None = None
    chunks: int | None = Field(gt=0)
    microbatch_size: int | None = Field(gt=0)
    global_batch: int = Field(gt=0)
    recompute: Literal["none", "selective", "selective-op", "full", "modules", "block"] | None
    recompute_modules: tuple[str, ...] = ()
    recompute_num_layers: int | None = Field(default=None, ge=1)
    sequence_parallel: bool | None
    zero: Literal[0, 1, 2, 3, "fsdp"] | None
    precision: choice(RUN_CHOICES["precision"], "precision") | None
    fp8_recipe: choice(RUN_CHOICES["fp8_recipe"], "fp8_recipe") | None = None
    fp8_all_gather: bool = False
    fp8_param_gather: bool = False
    moe_probs_in_activation: bool = False
    expandable_segments: bool = False
    overlap: tuple[Overlap, ...] = ()
    torch_compile: bool = False
    attention: Literal["unfused", "flash", "fused"] | None = "unfused"
    grad_reduce: Literal["fp32", "bf16", "fp16"] = "fp32"
    grad_accumulation: Literal["fused", "separate"] = "fused"
    cross_entropy: Literal["unfused", "native", "te"] = "unfused"
    transformer_impl: Literal["local", "transformer_engine"] = "local"
    moe_dispatcher: Literal["alltoall", "deepep", "hybridep"] = "alltoall"
    cuda_graph: Literal["none", "moe", "attn+moe", "full"] = "none"
    master_weights: bool = True
    pipeline_outputs: Literal["none", "last", "all"] = "none"


# Parallelism's fields that are neither a layout field (``job.execution.LAYOUT_FIELDS``) nor a
# run setting (``job.run_settings.RUN_FIELDS``) by name, and what each stands for
# (``_run_settings`` / ``_layout_fields``, made into ``LedgerRow.execution`` at load); every
# other field reaches the evaluator under its own name.
PARALLEL_ONLY: dict[str, str] = {
    "overlap": "the run settings of OVERLAP_SETTINGS",
    "torch_compile": "compile",
    "recompute_modules": "with recompute ``modules``, the layout's ``modules:a,b`` "
                         "(job.compute.module_recompute)",
    "recompute_num_layers": "with recompute ``block``, the layout's ``block:N`` "
                            "(job.compute.block_recompute)",
    "pipeline_layout": "with pipeline_split ``layout``, the layout's ``layout:<string>`` "
                       "(job.evaluation.pipeline_layout)",
}

# The row's key of each field the evaluator names in a refusal (``ConfigError.field``: an
# ``Execution`` layout field, a ``RunSettings`` setting, the ``System``'s gpus), so
# that a row's reason names what its file says (``by_row_key``): every field of ``parallel``
# under its own name, and those the section states its own way (``_layout_fields``,
# ``_run_settings``): the schedule by ``chunks``, ``compile`` as ``torch_compile``, each
# overlap setting by ``overlap``. ``sharding`` (by the row's framework) has no key.
ROW_KEYS: dict[str, str] = {
    **{name: f"parallel.{name}" for name in Parallelism.model_fields},
    "schedule": "parallel.chunks",
    "compile": "parallel.torch_compile",
    **{setting: "parallel.overlap" for setting, _ in OVERLAP_SETTINGS.values()},
    "gpus": "hardware.gpus",
}


def by_row_key(error: ConfigError) -> ConfigError:
    """``error`` naming the row's key of its field (``cp``: ``parallel.cp``), or of each of the
    fields given together (``ROW_KEYS``, ``ConfigError.named_by``); as it is when it names none
    or a field no key states."""
    return error.named_by(ROW_KEYS)


class Measurement(_Strict):
    """One published value in its published unit (``METRIC_UNITS``)."""

    metric: Metric
    value: float = Field(gt=0)

    @property
    def unit(self) -> str:
        """The published unit, e.g. ``TFLOP/s per GPU``."""
        return METRIC_UNITS[self.metric][0]

    def si(self) -> float:
        """The value in dlsched's internal unit (s, FLOP/s, B, fraction, tokens/s)."""
        return self.value * METRIC_UNITS[self.metric][2]


class LedgerRow(_Strict):
    """One published run: where it is published, its configuration, what was measured."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    source: Source
    citation: str
    hardware: Hardware
    model: Model
    parallel: Parallelism
    measured: tuple[Measurement, ...] = Field(min_length=1)
    supported: bool = True
    reason: str | None = None
    unpublished: tuple[str, ...] = ()
    inferred: dict[str, str] = Field(default_factory=dict)
    notes: str | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _section(cls, data: Any, handler: ModelWrapValidatorHandler[LedgerRow]) -> LedgerRow:
        section = data.get("model") if isinstance(data, dict) else None
        if isinstance(section, dict):
            check_model_section(section)
            unstated = "position_embedding" in section and section["position_embedding"] is None
            named = "position_embedding" in tuple(data.get("unpublished") or ())
            if unstated != named:
                raise ValueError("unpublished must name exactly the fields left empty: "
                                 "position_embedding is null" if unstated else
                                 "unpublished names position_embedding, which the model "
                                 "states")
        return handler(data)

    @model_validator(mode="after")
    def _check_row(self) -> LedgerRow:
        if self.supported == (self.reason is not None):
            raise ValueError("an unsupported row needs a reason, a supported row has none")
        missing = sorted(name for name in ("chunks", "microbatch_size", "recompute",
                                           "sequence_parallel", "precision", "zero",
                                           "attention")
                         if getattr(self.parallel, name) is None)
        if self.parallel.cp > 1 and self.parallel.cp_algorithm is None:
            missing.append("cp_algorithm")
        if (self.parallel.recompute == "modules") != bool(self.parallel.recompute_modules):
            raise ValueError("recompute_modules goes with recompute: modules, and only with it")
        if (self.parallel.recompute == "block") != (self.parallel.recompute_num_layers
                                                     is not None):
            raise ValueError("recompute_num_layers goes with recompute: block, and only with it")
        if (self.parallel.pipeline_split == "layout") != bool(self.parallel.pipeline_layout):
            raise ValueError("pipeline_layout goes with pipeline_split: layout, and only with it")
        if self.parallel.cp == 1 and self.parallel.cp_algorithm is not None:
            raise ValueError("cp_algorithm is for rows with cp > 1")
        if self.model.experts and self.model.router_balance is None:
            missing.append("router_balance")
        check_dense(self.model)
        if not self.model.experts and (self.parallel.ep > 1 or
                                       self.parallel.expert_tp is not None):
            raise ValueError("ep > 1 and expert_tp are for MoE models (experts) only")
        if self.hardware.inter_node_gbps_per_gpu is None and self.hardware.gpus > \
                self.hardware.gpus_per_node:
            missing.append("inter_node_gbps_per_gpu")
        if "position_embedding" in self.unpublished and not self.model.learned_positions:
            missing.append("position_embedding")  # null: checked on the section (_section)
        if sorted(missing) != sorted(self.unpublished):
            raise ValueError(f"unpublished must name exactly the fields left empty: "
                             f"{sorted(missing)}")
        metrics = [m.metric for m in self.measured]
        if len(set(metrics)) != len(metrics):
            raise ValueError("each metric at most once per row")
        return self

    _execution: Execution | ConfigError | None = PrivateAttr(default=None)
    _made_from: tuple[object, str, str] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _to_execution(self) -> LedgerRow:
        """The ``parallel`` section as the ``Execution`` the evaluator prices, made at load
        (``execution``); a section the evaluator's types refuse keeps its refusal, raised when
        the execution is asked for (the ledger still loads: ``ledger.predict`` reports it as
        the row's reason)."""
        try:
            made: Execution | ConfigError = Execution(**_layout_fields(self.parallel),
                                                      run=_run_settings(self))
        except ConfigError as error:
            made = error
        object.__setattr__(self, "_execution", made)
        object.__setattr__(self, "_made_from", (self.parallel, self.source, self.id))
        return self

    @property
    def execution(self) -> Execution:
        """How the row was parallelised and run, as one ``Execution``: every field of its
        ``parallel`` section under its own name (a layout field or a run setting), the
        published spellings (``PARALLEL_ONLY``, ``zero: fsdp``, the schedule by ``chunks``)
        mapped by the validator at load (again for a copy whose section changed:
        ``model_copy`` runs no validator); ConfigError with the refusal when the evaluator's
        types cannot hold it (an unpublished precision, say)."""
        made_from = self._made_from
        stale = made_from is None or made_from[0] is not self.parallel
        if stale or made_from[1:] != (self.source, self.id):  # type: ignore[index]
            self._to_execution()
        if isinstance(self._execution, ConfigError):
            raise self._execution
        assert self._execution is not None
        return self._execution

    def value(self, metric: str) -> float | None:
        """The published value of ``metric`` in its published unit, None if not published."""
        return next((m.value for m in self.measured if m.metric == metric), None)


def _run_settings(row: LedgerRow) -> RunSettings:
    """The run settings of ``row``: every field its ``parallel`` section names as a run
    setting (``job.run_settings.RUN_FIELDS``) as the row has it, and those the section states
    its own way (``PARALLEL_ONLY``): each overlap of ``overlap`` as the setting it turns on
    (``OVERLAP_SETTINGS``; a row without ``pp_p2p`` ran its pipeline transfers blocking),
    ``torch_compile`` as ``compile`` and ZeRO 3's ``sharding`` by the row's framework
    (``ledger.memory.sharding_of``)."""
    from dlsched.ledger.memory import sharding_of  # it reads LedgerRow: imported when used

    par = row.parallel
    turned_on = dict(OVERLAP_SETTINGS[name] for name in par.overlap if name in OVERLAP_SETTINGS)
    return run_settings_of(par, **{**NOT_OVERLAPPED, **turned_on}, compile=par.torch_compile,
                           sharding=sharding_of(row))


def _layout_fields(par: Parallelism) -> dict[str, object]:
    """The layout fields of a ``parallel`` section: every layout field it has
    (``job.execution.LAYOUT_FIELDS``) as it has it, but the values it states its own way: the
    schedule (not a field of the section) by its ``chunks``, interleaved 1F1B when more than
    one; ``zero`` ``fsdp`` as ZeRO 3; a ``cp_algorithm`` left empty (``cp`` 1) as ring;
    ``recompute`` ``modules`` with its ``recompute_modules`` as ``modules:a,b``
    (``job.compute.module_recompute``), ``pipeline_split`` ``layout`` with its
    ``pipeline_layout`` as ``layout:<string>``. A field left unpublished (None) stays None."""
    named = {name: getattr(par, name) for name in LAYOUT_FIELDS if name in Parallelism.model_fields}
    named.update(schedule=None if par.chunks is None else
                 "interleaved" if par.chunks > 1 else "1f1b",
                 recompute=(modules_recompute(par.recompute_modules)
                            if par.recompute == "modules" else
                            f"block:{par.recompute_num_layers}" if par.recompute == "block"
                            else par.recompute),
                 zero=3 if par.zero == "fsdp" else par.zero,
                 pipeline_split=(f"{LAYOUT_PREFIX}{par.pipeline_layout}"
                                 if par.pipeline_split == "layout" else par.pipeline_split),
                 cp_algorithm=par.cp_algorithm or "ring")
    return named
