"""The job planner's scenario schema: the three inputs of ``dlsched plan`` — what is trained
(``model``, ``seq``), how it is parallelised (the layout fields, any subset fixed, the rest
searched), what it runs on (``cluster``, ``gpus``, ``gpu``) — and how it is priced.

One declaration serves the command line (``dlsched plan``'s options are made from it), a
``plan`` sweep and the Python API: ``PlanScenario(model="llama3-70b", cluster="dgx-h100",
gpus=64, tp=8).run()``. Each field is checked by the job domain where it is used (the
evaluator, the layout, the cluster and model loaders), with an error naming its option.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field, model_validator

from dlsched.goodput.checkpoints import MODES as CHECKPOINT_MODES
from dlsched.goodput.energy import DEFAULT_PUE
from dlsched.goodput.failures import DEFAULT_MTBF_GPU_HOURS
from dlsched.goodput.objective import OBJECTIVES
from dlsched.inputs import STRICT, Choices, Several, checked, choice
from dlsched.job.evaluation.pipeline_split import SPLITS, check_split
from dlsched.job.evaluation.unit_walk import UNIT_SCHEDULES
from dlsched.job.execution import (
    CP_ALGORITHMS,
    LAYOUT_FIELDS,
    RECOMPUTE,
    SCHEDULES,
    Execution,
    check_recompute,
    execution_file_fields,
)
from dlsched.job.run_choices import RUN_CHOICES
from dlsched.job.run_settings import RUN_DEFAULTS, run_settings_of
from dlsched.job.time_to_train_fields import Count, Duration, StorageName

if TYPE_CHECKING:
    from dlsched.job.api import PlanReport

MAX_GPUS = 1_000_000
MAX_COUNT = 10_000_000  # a degree, a batch or a sequence length: beyond any job planned


def _names(names: tuple[str, ...]) -> str:
    return " | ".join(names)


class PlanScenario(BaseModel):
    """One training job to plan: the model, the cluster, the fixed part of the layout and the
    pricing settings (see each field). ``collective_policy`` is the one field several values
    of which a command compares (one row each)."""

    model_config = STRICT
    model: Annotated[str, Field(description=(
        "A bundled transformer (gpt3-175b, gpt-39.1b, ...) or a spec file (.yaml/.json)."))
        ] = "gpt3-175b"
    cluster: Annotated[str | None, Field(description=(
        "Node preset scaled by --gpus (dgx-a100, dgx-h100, dgx-h200, dgx-h800, dgx-b200, "
        "gb200-nvl72, dgx-b300, gb300-nvl72, mi300x-8, grand-teton-h100) or a multi-dimensional "
        "topology preset or file (3D-FC_Ring_SW); default: the node preset of --gpu "
        "(dgx-h200 for h200, ...), dgx-a100 without --gpu or for a GPU no preset carries."))
        ] = None
    gpus: Annotated[int | None, Field(ge=1, le=MAX_GPUS, description=(
        "GPUs (with a node preset)."))] = None
    execution: Annotated[str | None, Field(description=(
        "An execution file (.yaml/.json) fixing any layout fields and run settings "
        "(docs/inputs.md); an option given overrides it (unless at its default), the layout "
        "fields left out are searched."))
        ] = None
    gpu: Annotated[str | None, Field(description=(
        "GPU compute preset or file (default: the node's; a100 on a topology)."))] = None
    precision: Annotated[choice(RUN_CHOICES["precision"], "precision"), Field(description=(
        "bf16 | fp16 (Megatron's mixed precision: 16-bit weights, FP32 master) | "
        "autocast | fp8 (the linear layers in FP8 by --fp8-recipe, the rest bf16; a GPU with "
        "FP8 tensor cores)."))] = RUN_DEFAULTS["precision"]
    fp8_recipe: Annotated[choice(RUN_CHOICES["fp8_recipe"], "FP8 recipe") | None, Field(
        description=(
        "With --precision fp8: delayed | current | mxfp8 | nvfp4 (Transformer Engine's "
        "delayed, per-tensor current, MXFP8 and NVFP4 block scaling; mxfp8 on Blackwell, "
        "nvfp4 with its GEMMs in FP4 on Blackwell's FP4 tensor cores) | tensorwise | "
        "rowwise | rowwise_with_gw_hp (torchao's float8, TorchTitan; the last with the "
        "weight gradient in bf16)."))] = RUN_DEFAULTS["fp8_recipe"]
    fp8_all_gather: Annotated[bool, Field(description=(
        "ZeRO 3 gathers the weights in FP8 (torchao's enable_fsdp_float8_all_gather; "
        "tensorwise)."))] = RUN_DEFAULTS["fp8_all_gather"]
    fp8_param_gather: Annotated[bool, Field(description=(
        "With Transformer Engine's FP8 recipes: FP8 primary weights, no 16-bit copy of the "
        "FP8 linears (Megatron-Core --fp8-param-gather; Megatron-Bridge's FP8 recipes)."))
        ] = RUN_DEFAULTS["fp8_param_gather"]
    moe_probs_in_activation: Annotated[bool, Field(description=(
        "MoE: the routing probabilities applied in the experts' activation, the combine "
        "keeping no expert outputs (Megatron-Core 0.13 and later: the default; "
        "--no-moe-probs-in-activation for older releases)."))] = True
    expandable_segments: Annotated[bool, Field(description=(
        "The run sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (TorchTitan's "
        "run_train.sh does): the memory check keeps no fragmentation margin."))
        ] = RUN_DEFAULTS["expandable_segments"]
    compile: Annotated[bool, Field(description=(
        "torch.compile (TorchTitan's --compile): memory-bound ops fused by Inductor."))
        ] = RUN_DEFAULTS["compile"]
    async_tp: Annotated[bool, Field(description=(
        "Asynchronous TP (TorchTitan's enable_async_tensor_parallel, with --compile): TP "
        "collectives decomposed beside their GEMMs."))] = RUN_DEFAULTS["async_tp"]
    from_torchtitan: Annotated[str | None, Field(description=(
        "A TorchTitan job config (TOML): the layout, batch, precision, compile and async TP it "
        "sets replace these fields (job.exports.torchtitan_config)."))] = None
    attention: Annotated[choice(RUN_CHOICES["attention"], "attention kernel"), Field(description=(
        "Attention core kernel, as Megatron-Core's --attention-backend names them: flash "
        "(FlashAttention-2: TorchTitan's SDPA, Megatron-Core's auto before Hopper) | fused "
        "(Transformer Engine's cuDNN fused attention: what auto runs on H100/H200) | unfused "
        "(Megatron-LM 2021: scores written out, softmax, dropout; what SC21 and Korthikanti "
        "et al. ran)."))] = RUN_DEFAULTS["attention"]
    overlap_param_gather: Annotated[bool, Field(description=(
        "ZeRO 1-2: the weights' all-gather overlaps the next forward (Megatron-LM "
        "--overlap-param-gather)."))] = RUN_DEFAULTS["overlap_param_gather"]
    tp_comm_overlap: Annotated[bool, Field(description=(
        "With sequence parallelism: TP collectives overlap their GEMMs (Megatron-Core "
        "--tp-comm-overlap, Transformer Engine userbuffers)."))] = RUN_DEFAULTS["tp_comm_overlap"]
    grad_reduce: Annotated[choice(RUN_CHOICES["grad_reduce"], "gradient format"), Field(
        description=(
        "Gradients reduced and kept as fp32 (Megatron-LM's default main gradients) | bf16 "
        "(--grad-reduce-in-bf16; bf16 training only) | fp16 (fp16 training without "
        "--accumulate-allreduce-grads-in-fp32)."))] = RUN_DEFAULTS["grad_reduce"]
    grad_accumulation: Annotated[choice(RUN_CHOICES["grad_accumulation"],
                                        "gradient accumulation"), Field(
        description=(
            "How gradients add up over microbatches: fused (into the weight-gradient GEMMs: "
            "Megatron-Core, Megatron-LM since 2022 with FP32 main gradients) | separate (an "
            "add per parameter after each microbatch's backward: Megatron-LM before 2022, or "
            "--no-gradient-accumulation-fusion)."))] = RUN_DEFAULTS["grad_accumulation"]
    pipeline_p2p: Annotated[choice(RUN_CHOICES["pipeline_p2p"], "pipeline transfers"), Field(
        description=(
        "Whether a pipeline rank computes while its transfers run: auto (Megatron-Core: "
        "overlapped for the interleaved schedule, blocking otherwise) | blocking (batched "
        "send/recv then a device sync: Megatron-LM 2021-22, Megatron-Core's non-interleaved "
        "schedule, --no-overlap-p2p-communication) | overlapped (transfers beside the "
        "compute)."))] = RUN_DEFAULTS["pipeline_p2p"]
    moe_dispatcher: Annotated[choice(RUN_CHOICES["moe_dispatcher"], "MoE token dispatcher"), Field(
        description=(
        "How MoE tokens reach their experts: alltoall (Megatron-Core's All-to-All, k copies "
        "per token) | deepep (Megatron-Core's flex dispatcher with DeepEP: one copy per "
        "destination node, forwarded over NVLink; with the model's router_groups it prices "
        "node-limited routing, job.communication.moe_dispatch) | hybridep (the flex "
        "dispatcher's HybridEP backend: one copy per destination rank at HybridEP's measured "
        "NVLink rate)."))] = RUN_DEFAULTS["moe_dispatcher"]
    cuda_graph: Annotated[choice(RUN_CHOICES["cuda_graph"], "CUDA graph scope"), Field(
        description=(
        "What Transformer Engine's CUDA graphs capture of the MoE layers (Megatron-Core's "
        "--cuda-graph-scope): none | moe (moe_router and moe_preprocess: the router and the "
        "dispatcher's preprocess replayed as one launch) | attn+moe (the attention's launches "
        "not taken off) | full (a full-iteration graph); job.compute.moe_host."))] = \
        RUN_DEFAULTS["cuda_graph"]
    moe_a2a_overlap: Annotated[bool, Field(description=(
        "Megatron-Core's EP All-to-All overlap (--overlap-moe-expert-parallel-comm "
        "--delay-wgrad-compute): one microbatch's forward and another's backward merged, each "
        "one's All-to-Alls beside the other's compute (job.evaluation.a2a_overlap); an MoE "
        "model with EP > 1, 1F1B without a pipeline or interleaved, no full or moe "
        "recomputation."))] = RUN_DEFAULTS["moe_a2a_overlap"]
    sharding: Annotated[choice(RUN_CHOICES["sharding"], "ZeRO 3 sharding"), Field(description=(
        "Whose ZeRO 3 (--zero 3; fsdp2 and fsdp2-split refused with --zero 0-2): zero "
        "(Megatron-FSDP: weights gathered and gradients reduce-scattered per layer per "
        "microbatch) | fsdp2 / fsdp2-split (PyTorch's FSDP2 as TorchTitan wraps it before / "
        "from 83e6941; without PP its exposed first gathers and last reduce-scatters and its "
        "compute-stream copies added, under PP each unit gathered and reduce-scattered once per "
        "iteration with FP32 unsharded gradients held: job.communication.fsdp2_costs, "
        "job.memory.torch_runtime)."))] = \
        RUN_DEFAULTS["sharding"]
    global_batch: Annotated[int, Field(ge=1, le=MAX_COUNT, description=(
        "Sequences per iteration."))] = 1536
    tp: Annotated[int | None, Field(ge=1, le=MAX_COUNT, description=(
        "Tensor-parallel degree (searched if not given)."))] = None
    cp: Annotated[int | None, Field(ge=1, le=MAX_COUNT, description=(
        "Context-parallel degree (each sequence split over CP GPUs; searched for long "
        "sequences if not given)."))] = None
    cp_algorithm: Annotated[choice(CP_ALGORITHMS, "CP algorithm") | None, Field(description=(
        "Context parallelism's attention: ring (Megatron-Core/TE p2p ring attention) | "
        "all-to-all (DeepSpeed-Ulysses); searched if not given."))] = None
    seq: Annotated[int | None, Field(ge=1, le=MAX_COUNT, description=(
        "Sequence length in tokens (overrides the model's)."))] = None
    ep: Annotated[int | None, Field(ge=1, le=MAX_COUNT, description=(
        "Expert-parallel degree of the MoE layers (1 if not given)."))] = None
    expert_tp: Annotated[int | None, Field(ge=1, le=MAX_COUNT, description=(
        "Tensor-parallel degree of each expert (default: TP, Megatron-Core's "
        "--expert-tensor-parallel-size; 1 = MoE parallel folding, EP over the TP ranks too); "
        "searched with TP and 1 if not given."))] = None
    pp: Annotated[int | None, Field(ge=1, le=MAX_COUNT, description=(
        "Pipeline-parallel degree."))] = None
    dp: Annotated[int | None, Field(ge=1, le=MAX_COUNT, description="Data-parallel degree.")] = None
    chunks: Annotated[int | None, Field(ge=1, le=MAX_COUNT, description=(
        "Model chunks per pipeline rank (interleaved schedule)."))] = None
    pipeline_split: Annotated[Annotated[checked(check_split), Choices(
        (*SPLITS, "layout:<Megatron-Core layout>"))] | None, Field(description=(
        f"Layers over the PP x chunks virtual stages: {_names(SPLITS)} (Megatron-Core's "
        "--account-for-embedding/loss-in-pipeline-split: each counted as a layer, the "
        "first/last stage one layer fewer), or layout:<string>, every stage listed as "
        "Megatron-Core's --pipeline-model-parallel-layout lists it (E embedding, t layer, m "
        "MTP module, L loss, | between stages; e.g. DeepSeek-V3's 'layout:Et*4|(t*4|)*14tmL' "
        "at PP 16); searched (given layouts: the first accepted) if not given."))] = None
    microbatch_size: Annotated[int | None, Field(ge=1, le=MAX_COUNT, description=(
        "Sequences per microbatch."))] = None
    schedule: Annotated[choice(SCHEDULES + UNIT_SCHEDULES, "schedule") | None, Field(
        description=(f"{_names(SCHEDULES + UNIT_SCHEDULES)} (the last three: ZB-V, DualPipe "
                     "and DualPipeV with its overlapped F & B pairs; priced when given, not "
                     "searched)."))] = None
    recompute: Annotated[Annotated[checked(check_recompute), Choices(
        (*RECOMPUTE, "modules:<list>", "block:<N>"))] | None, Field(description=(
        "none | selective | full | selective-op (TorchTitan's per-op policy: every other "
        "matmul kept) | modules:<list> (Megatron-Core's --recompute-modules, comma-separated: "
        "core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts) | block:<N> "
        "(Megatron-Core's --recompute-method block: the first N layers of each model chunk "
        "in full); selective-op and modules priced when given, not searched; block searched "
        "where no recomputation does not fit (its fewest N that fits)."))] = None
    sequence_parallel: Annotated[bool | None, Field(description=(
        "Megatron sequence parallelism (searched if not given)."))] = None
    zero: Annotated[int | None, Field(ge=0, le=3, description="ZeRO stage (3 = FSDP).")] = None
    collective_policy: Annotated[choice(RUN_CHOICES["collective_policy"], "collective policy"),
                                 Several("baseline"), Field(description=(
                                     "Collective policy (one row each)"))
                                 ] = RUN_DEFAULTS["collective_policy"]
    dp_policy: Annotated[choice(RUN_CHOICES["dp_policy"], "DP policy"), Field(description=(
        "How dlsched's plan overlaps gradient reduction with the last backward: "
        f"{', '.join(RUN_CHOICES['dp_policy'])}."))] = "usbyte"
    baselines: Annotated[bool, Field(description=(
        "Search the baselines' spaces (megatron, megatron-sp, megatron-core, fsdp) too."))] = True
    tokens: Annotated[Count | None, Field(description=(
        "Tokens to train on (15.6T, 2B, ...): adds the time to train (days, GPU-hours, "
        "interruptions, goodput, checkpoint interval, MWh, cost; dlsched.goodput)."))] = None
    iterations: Annotated[Count | None, Field(description=(
        "Iterations to train (500k, ...), instead of --tokens."))] = None
    mtbf_gpu_hours: Annotated[float, Field(gt=0, le=1e9, description=(
        "GPU-hours between job-stopping failures, per GPU (default 42,237: the mean rate of "
        "the BLOOM 176B and OPT-175B training logs; dlsched.goodput.failures)."))] = (
            DEFAULT_MTBF_GPU_HOURS)
    restart: Annotated[Duration, Field(description=(
        "Time from a failure to training again, before the checkpoint load."))] = "10 min"
    storage: Annotated[StorageName, Field(description=(
        "Checkpoint storage: tectonic (Llama 3's, 2 TB/s in all), a bandwidth per node "
        "('25 GB/s') or in all ('200 GB/s total')."))] = "tectonic"
    checkpoint: Annotated[choice(CHECKPOINT_MODES, "checkpoint mode"), Field(description=(
        "sync (training waits for the write) | async (waits for a snapshot to host memory, "
        "the write runs behind)."))] = "sync"
    pue: Annotated[float, Field(ge=1, le=3, description=(
        "Data-centre power usage effectiveness (facility / IT energy)."))] = DEFAULT_PUE
    gpu_hour_price: Annotated[float | None, Field(ge=0, le=1e6, description=(
        "Price per GPU-hour (adds the cost column)."))] = None
    objective: Annotated[choice(tuple(OBJECTIVES), "objective"), Field(description=(
        "What the searched plan minimises: upper (the upper end of the iteration's 90% "
        "interval from the ledger's residuals, docs/plan.md) | expected (the predicted "
        "iteration) | time-to-train | energy | cost (the latter three re-rank the search's "
        "shortlist; need --tokens or --iterations)."))] = "upper"

    @model_validator(mode="before")
    @classmethod
    def _node_of_gpu(cls, data: Any) -> Any:
        """No cluster given: the node preset of the GPU given (``job.cluster.node_of_gpu``)."""
        if not isinstance(data, dict) or data.get("cluster") is not None:
            return data
        from dlsched.job.cluster import node_of_gpu

        return {**data, "cluster": node_of_gpu(data.get("gpu"))}

    @model_validator(mode="before")
    @classmethod
    def _execution_file(cls, data: Any) -> Any:
        """The fields the ``execution`` file states (layout fields and run settings) for those
        not given (None) or left at their default (the command line passes every option)."""
        if not isinstance(data, dict) or data.get("execution") is None:
            return data
        stated = execution_file_fields(str(data["execution"]))
        given = {name: value for name, value in data.items() if value is not None and not (
            name in stated and value == cls.model_fields[name].default)}
        return {**stated, **given}

    def fixed(self) -> dict[str, Any]:
        """The layout fields given (the rest is searched; ``global_batch`` is always given)."""
        return {name: getattr(self, name) for name in LAYOUT_FIELDS
                if name != "global_batch" and getattr(self, name) is not None}

    def searched_execution(self) -> Execution:
        """The execution to price or search: the layout fields given, the rest searched, and
        the run settings (``run_settings_of``: each field named as one)."""
        return Execution.searching(global_batch=self.global_batch, **self.fixed(),
                                   run=run_settings_of(self))

    def run(self, policies: tuple[str, ...] | None = None) -> PlanReport:
        """Plan the job (``job.api.plan``): one row per collective policy (``policies``, each
        checked; default: this scenario's ``collective_policy``)."""
        from dlsched.job.api import plan

        return plan(self, policies)
