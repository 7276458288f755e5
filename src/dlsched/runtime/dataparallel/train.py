"""Train with every data-parallel policy on spawned ranks and compare measured iteration times
with the simulator's predictions.

On every rank: build the module (same seed everywhere, a different data batch per rank),
profile it in place (all ranks at once, so the profile sees the same CPU sharing as training;
the element-wise median over ranks is used, so every rank derives the same plans), by default
inside training itself (``profile_in="training"``: iterations through the executor with one
all-reduce after backward and a barrier, so every rank computes in lockstep as in training,
with the executor's hooks and lazy updates, and no message overlaps compute; per iteration
the slowest rank's times, the pace training runs at; see ``training_rows``), plan every
policy from that profile, then in each of ``rounds`` rounds profile again and train every
policy ``iterations`` steps from the same initial parameters through the ``PlanExecutor`` —
and with ``torch-ddp``, real ``DistributedDataParallel`` as the reference. An iteration is
measured as the time between the ends of consecutive forwards (backward, the communication
the next forward waits for, and that forward with its updates): the simulator's iteration.
Its median after ``warmup`` iterations of every round is compared with the simulator's
prediction of the executed plan on the profile pooled over the rounds and the network model.
"""

from __future__ import annotations

import copy
import importlib
import itertools
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from dlsched.dataparallel import POLICIES, DPProblem, DPResult, parse_network, simulate_plan
from dlsched.dataparallel.plan import DPPlan, as_issued
from dlsched.errors import ConfigError
from dlsched.models.profile_io import ModelProfile
from dlsched.sim.timeline import Span, Timeline
from dlsched.validation import LEARNING_RATE

REFERENCE = "torch-ddp"
OPTIMIZERS = ("sgd", "adam")
PROFILE_IN = ("training", "passes")
MAX_ROUNDS = 100


@dataclass(frozen=True)
class TrainConfig:
    """What to train and how: ``model`` is ``resnet``, ``gpt`` or ``package.module:factory``
    (then ``input_shape`` is the shape of its float batch); sizes are keyword arguments of
    the factory. Each policy trains ``iterations`` steps (``warmup`` not measured) in each of
    ``rounds`` rounds (see ``train_rank``)."""

    model: str = "resnet"
    batch_size: int = 8
    input_shape: tuple[int, ...] = ()
    model_sizes: dict[str, Any] = field(default_factory=dict)
    policies: tuple[str, ...] = (*POLICIES, REFERENCE)
    network: str = "ring:10Gb/s,0us"
    iterations: int = 12
    warmup: int = 4
    optimizer: str = "sgd"
    lr: float = 0.01
    profile_repeats: int = 8
    profile_in: str = "training"
    seed: int = 0
    return_parameters: bool = False
    rounds: int = 1

    def __post_init__(self) -> None:
        unknown = [p for p in self.policies if p not in POLICIES and p != REFERENCE]
        if unknown or not self.policies:
            raise ConfigError(f"policy: unknown {unknown}; accepted: "
                              + ", ".join([*POLICIES, REFERENCE]))
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"optimizer: {self.optimizer!r}; accepted: "
                              + ", ".join(OPTIMIZERS))
        if not 0 <= self.warmup < self.iterations - 1:
            raise ConfigError(f"iterations: need warmup ({self.warmup}) < iterations - 1 "
                              f"(got {self.iterations})")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size: must be >= 1 (got {self.batch_size})")
        LEARNING_RATE.check(self.lr, "lr")
        if not 1 <= self.rounds <= MAX_ROUNDS:
            raise ConfigError(f"rounds: must be 1 to {MAX_ROUNDS} (got {self.rounds})")
        if self.profile_in not in PROFILE_IN:
            raise ConfigError(f"profile_in: {self.profile_in!r}; accepted: "
                              + ", ".join(PROFILE_IN))


@dataclass(frozen=True)
class PolicyRun:
    """One policy measured on the ranks: iteration times (s) on rank 0, its plan, timeline."""

    policy: str
    iteration_s: tuple[float, ...]
    plan: DPPlan | None
    timeline: Timeline
    parameters: dict[str, Any] | None = None

    @property
    def measured_s(self) -> float:
        """Median measured iteration time, seconds."""
        return statistics.median(self.iteration_s)


def build_module(config: TrainConfig) -> Any:
    """The module, its parameters seeded by ``config.seed``."""
    import torch

    from dlsched.runtime import models

    torch.manual_seed(config.seed)
    if config.model in models.MODELS:
        return models.MODELS[config.model](**config.model_sizes)
    path, colon, name = config.model.partition(":")
    if not colon or not config.input_shape:
        raise ConfigError(f"module: {config.model!r} is not one of {list(models.MODELS)} nor "
                          "'package.module:factory' with --input-shape")
    try:
        factory = getattr(importlib.import_module(path), name)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"module: cannot load {config.model!r}: {error}") from None
    return models.user_factory(factory, config.model, torch.nn.Module, "module",
                               **config.model_sizes)


def check_module(config: TrainConfig) -> None:
    """Refuse (ConfigError naming ``--module``/``--input-shape``) a module that cannot train,
    before any rank starts: build it and run one forward and backward on a batch."""
    from dlsched.runtime.dataparallel.profile import default_loss

    module, batch = module_and_batch(config, 0)
    try:
        default_loss(module(batch)).backward()
    except Exception as error:
        message = (str(error).strip().splitlines() or [""])[0]
        raise ConfigError(f"module: {config.model!r} fails on a batch of shape "
                          f"{tuple(batch.shape)} (--input-shape, --batch-size): "
                          f"{type(error).__name__}: {message}") from None


def optimizer_factory(name: str, lr: float) -> Callable[[list[Any]], Any]:
    """SGD with momentum 0.9, or Adam, at learning rate ``lr``."""
    import torch

    if name == "sgd":
        return lambda params: torch.optim.SGD(params, lr=lr, momentum=0.9)
    return lambda params: torch.optim.Adam(params, lr=lr)


def problem_from_profile(profile: ModelProfile, network: str, workers: int) -> DPProblem:
    """The data-parallel problem of a profiled module on ``network`` over ``workers`` ranks."""
    model = profile.build()
    return DPProblem(tuple(layer.forward_time or 0.0 for layer in model.layers),
                     tuple(layer.backward_time or 0.0 for layer in model.layers),
                     tuple(model.gradient_bytes()), parse_network(network, workers),
                     tuple(layer.name for layer in model.layers), model.name)


def _window(timeline: Timeline, start: float, end: float) -> Timeline:
    """The spans of one iteration, shifted so the iteration starts at 0."""
    return Timeline(Span(s.resource, s.start - start, s.end - start, s.kind, s.label,
                         s.num_bytes, s.group, s.args)
                    for s in timeline.spans if start - 1e-9 <= s.start < end)


def _train(module: Any, batch: Any, config: TrainConfig, step: Callable[[], None],
           ends: list[float], before_extra: Callable[[], None] | None = None) -> list[float]:
    """``config.iterations`` steps, with ``before_extra`` one more step after them (it is
    called after that step's forward, before its backward), and a last forward; the seconds
    between consecutive forward ends (``ends``, appended by the caller's hook) after
    ``config.warmup``, the extra step's backward and the last forward not among them."""
    from dlsched.runtime.dataparallel.profile import default_loss

    for iteration in range(config.iterations + (before_extra is not None)):
        loss = default_loss(module(batch))
        if iteration == config.iterations and before_extra is not None:
            before_extra()
        loss.backward()
        step()
    module(batch)
    periods = [b - a for a, b in itertools.pairwise(ends)]
    return periods[config.warmup:config.iterations]


def run_plan(plan: DPPlan, initial: Any, batch: Any, problem: DPProblem,
             config: TrainConfig) -> PolicyRun:
    """Train a copy of ``initial`` with ``plan`` through the executor (on every rank): the
    measured iterations unrecorded, like torch DDP's (recording cost GPT about 4 ms of the
    main thread's 165-225 ms per iteration on the 2-core machine), then one more, recorded
    for the timeline and not measured."""
    from dlsched.runtime.dataparallel.executor import PlanExecutor

    module = copy.deepcopy(initial)
    executor = PlanExecutor(module, problem, plan, optimizer_factory(config.optimizer, config.lr),
                            record=True)
    executor.set_recording(False)
    periods = _train(module, batch, config, lambda: None, executor.forward_ends,
                     before_extra=lambda: executor.set_recording(True))
    executor.finish()
    executor.close()
    ends = executor.forward_ends
    last = _window(executor.timeline(), ends[-2] - ends[0], ends[-1] - ends[0])
    return PolicyRun(plan.policy, tuple(periods), plan, last, _state(module, config))


def run_reference(initial: Any, batch: Any, config: TrainConfig) -> PolicyRun:
    """Train a copy of ``initial`` with real ``DistributedDataParallel`` (on every rank), the
    same steps as ``run_plan``: the measured ones and one more, not measured."""
    import time

    from torch.nn.parallel import DistributedDataParallel

    from dlsched.runtime.spawn import prioritize_comm_threads

    module = copy.deepcopy(initial)
    ddp = DistributedDataParallel(module)
    prioritize_comm_threads()  # DDP may start communication threads of its own
    optimizer = optimizer_factory(config.optimizer, config.lr)(list(ddp.parameters()))
    ends: list[float] = []
    handle = module.register_forward_hook(lambda *_: ends.append(time.perf_counter()))

    def step() -> None:
        optimizer.step()
        optimizer.zero_grad()

    periods = _train(ddp, batch, config, step, ends, before_extra=lambda: None)
    handle.remove()
    return PolicyRun(REFERENCE, tuple(periods), None, Timeline([]), _state(module, config))


def _state(module: Any, config: TrainConfig) -> dict[str, Any] | None:
    if not config.return_parameters:
        return None
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def module_and_batch(config: TrainConfig, rank: int) -> tuple[Any, Any]:
    """The seeded module (same on every rank) and this rank's own seeded batch."""
    import torch

    initial = build_module(config)
    return initial, make_batch(initial, config, torch.Generator().manual_seed(config.seed + 1
                                                                              + rank))


def training_rows(initial: Any, batch: Any, config: TrainConfig, passes: ModelProfile,
                  world_size: int) -> tuple[Any, Any]:
    """Per-layer compute measured inside training (run on every rank at once):
    max(``config.iterations``, ``config.warmup`` + ``config.profile_repeats``) iterations of a
    copy of ``initial`` through the executor with one all-reduce of every gradient after
    backward and a barrier, so the ranks compute in lockstep as training does, through the same
    hooks and lazy updates, while no message overlaps compute. Per iteration after
    ``config.warmup``: each gradient's ready time after the previous forward's end (that
    forward's loss included), each owning module's forward span and its share of the update
    (the barrier plan updates every module in one optimizer call, before the first forward;
    each module gets the call's seconds in proportion to its parameters, so the shares sum
    to what one call costs and a plan updating in several groups is charged the same work).
    The ranks gather these and take, per iteration, the slowest rank's (largest backward +
    forward): every all-reduce waits for the last rank to reach it, so training runs at the
    slowest rank's pace, which on shared cores is a different rank each iteration. Returns
    (forward, ready): one row per iteration, seconds, the same on every rank
    (``RoundProfiler.pooled`` turns them into per-layer times). ``passes``: the module's
    profile from plain passes (names, sizes, the plan's layers)."""
    import numpy as np
    import torch.distributed as dist

    from dlsched.dataparallel.plan import Message, whole_layer
    from dlsched.runtime.dataparallel.executor import PlanExecutor
    from dlsched.runtime.dataparallel.profile import owner_sizes, parameter_owners

    problem = problem_from_profile(passes, config.network, world_size)
    plan = DPPlan((Message(tuple(whole_layer(problem, layer)
                                 for layer in range(problem.num_layers)),
                           problem.backward_end),), barrier=True, policy="profile")
    module = copy.deepcopy(initial)
    executor = PlanExecutor(module, problem, plan, optimizer_factory(config.optimizer,
                                                                     config.lr), record=True)
    config = replace(config, iterations=max(config.iterations,
                                            config.warmup + config.profile_repeats))
    _train(module, batch, config, lambda: None, executor.forward_ends)
    executor.finish()
    executor.close()
    owners = parameter_owners(module)
    names = {id(sub): name or "(root)" for name, sub in module.named_modules()}
    column = {names[id(sub)]: o for o, (sub, _) in enumerate(owners)}
    sizes = owner_sizes(owners, executor.parameters)
    spans = executor.recorder.timeline().spans if executor.recorder else []
    ends = executor.forward_ends
    forward = np.zeros((len(ends) - 1 - config.warmup, len(owners)))
    ready = np.zeros((len(forward), problem.num_layers))
    for row, (start, end) in enumerate(itertools.pairwise(ends[config.warmup:])):
        for span in (s for s in spans if start - 1e-9 <= s.start < end):
            if span.kind == "backward":
                ready[row, span.args["layer"]] = span.end - start
            elif span.kind == "forward":
                forward[row, column[span.label.split(" ", 1)[1]]] += span.duration
            elif span.kind == "update":
                group = [column[name] for name in span.args["owners"]]
                forward[row, group] += span.duration * sizes[group] / sizes[group].sum()
    gathered: list[Any] = [None] * world_size
    dist.all_gather_object(gathered, (forward, ready))
    return slowest_iterations(gathered)


def slowest_iterations(ranks: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    """Per iteration, the slowest rank's rows: ``ranks`` holds each rank's (forward, ready)
    arrays (one row per iteration: owners' forward seconds; layers' ready seconds after
    backward starts); slowest = largest forward sum + latest ready time."""
    import numpy as np

    rows = [max(((forward[i], ready[i]) for forward, ready in ranks),
                key=lambda row: float(row[0].sum() + row[1].max()))
            for i in range(len(ranks[0][0]))]
    return np.array([f for f, _ in rows]), np.array([r for _, r in rows])


@dataclass
class RoundProfiler:
    """The module's profile, measured again in every round of training and pooled: the
    plain-pass profile (every rank's, element-wise median: names, sizes, and the profile
    itself with ``profile_in="passes"``) and, inside training, each round's rows
    (``training_rows``); ``measure`` adds a round and returns the pooled profile, whose
    per-layer times are the medians over every round's iterations (``layer_times``)."""

    initial: Any
    batch: Any
    config: TrainConfig
    world_size: int
    passes: ModelProfile
    rows: list[tuple[Any, Any]] = field(default_factory=list)

    @classmethod
    def start(cls, initial: Any, batch: Any, config: TrainConfig,
              world_size: int) -> RoundProfiler:
        """Profile plain passes on every rank at once; every rank gets the median."""
        import torch.distributed as dist

        from dlsched.runtime.dataparallel.profile import median_profile, profile
        from dlsched.runtime.execution import Execution

        own = profile(copy.deepcopy(initial), batch, repeats=config.profile_repeats,
                      optimizer=optimizer_factory(config.optimizer, config.lr),
                      name=config.model,  # the executor needs every gradient: refuse unused
                      execution=Execution(unused="error"))
        gathered: list[Any] = [None] * world_size
        dist.all_gather_object(gathered, own)
        return cls(initial, batch, config, world_size, median_profile(gathered))

    def measure(self) -> ModelProfile:
        """One more round of in-training rows (none when profiling plain passes); the pooled
        profile."""
        if self.config.profile_in == "training":
            self.rows.append(training_rows(self.initial, self.batch, self.config, self.passes,
                                           self.world_size))
        return self.pooled()

    def pooled(self) -> ModelProfile:
        """Per-layer times from every round's rows (the plain-pass profile without any)."""
        import numpy as np

        from dlsched.runtime.dataparallel.profile import layer_times, parameter_owners

        if not self.rows:
            return self.passes
        times = layer_times(np.concatenate([f for f, _ in self.rows]),
                            np.concatenate([r for _, r in self.rows]),
                            parameter_owners(self.initial))
        return self.passes.model_copy(update={"layers": [
            layer.model_copy(update={"forward_time_s": float(f), "backward_time_s": float(b)})
            for layer, f, b in zip(self.passes.layers, *times, strict=True)]})


def agreed_profile(initial: Any, batch: Any, config: TrainConfig, world_size: int) -> Any:
    """One round's profile on every rank at once (``config.profile_in``: plain passes, or
    inside training, see ``training_rows``); every rank gets the same."""
    return RoundProfiler.start(initial, batch, config, world_size).measure()


def rotated(policies: tuple[str, ...], round_: int, rounds: int) -> tuple[str, ...]:
    """The policies in round ``round_``'s order: shifted by round_ / rounds of the list, so
    over the rounds each policy takes its turn at the start, in the middle and at the end."""
    shift = round_ * len(policies) // rounds
    return policies[shift:] + policies[:shift]


def train_rank(rank: int, world_size: int, config: TrainConfig) -> dict[str, Any] | None:
    """Run on every rank: profile, plan every policy from that profile, then
    ``config.rounds`` rounds, each profiling again and training every policy from the
    initial parameters (order ``rotated``), so a drift of a shared machine reaches the profile
    and every policy's measurement alike. Rank 0 returns the profile pooled over the rounds
    (``profile``), the one the plans were made from (``planned``), and per policy its
    iteration times from every round (plan, timeline and parameters from the last)."""
    initial, batch = module_and_batch(config, rank)
    profiler = RoundProfiler.start(initial, batch, config, world_size)
    planned = profiler.measure()
    problem = problem_from_profile(planned, config.network, world_size)
    plans = {policy: POLICIES[policy](problem) for policy in config.policies
             if policy != REFERENCE}
    measured: dict[str, list[PolicyRun]] = {policy: [] for policy in config.policies}
    for round_ in range(config.rounds):
        if round_:
            profiler.measure()
        for policy in rotated(config.policies, round_, config.rounds):
            measured[policy].append(
                run_reference(initial, batch, config) if policy == REFERENCE
                else run_plan(plans[policy], initial, batch, problem, config))
    runs = [replace(rounds[-1], iteration_s=tuple(t for run in rounds for t in run.iteration_s))
            for rounds in measured.values()]
    return ({"profile": profiler.pooled(), "planned": planned, "runs": runs} if rank == 0
            else None)


def make_batch(module: Any, config: TrainConfig, generator: Any = None) -> Any:
    """A random batch of ``config.batch_size`` samples the module accepts."""
    import torch

    from dlsched.runtime import models

    if config.model in models.MODELS:
        return models.example_input(module, config.batch_size, generator=generator)
    return torch.randn(*config.input_shape, generator=generator)


def predict(run: PolicyRun, problem: DPProblem) -> DPResult:
    """The simulator's prediction of what ``run`` executed, on ``problem`` (the profile pooled
    over the rounds it was measured in): its plan with every message launched when its
    gradients are ready (``as_issued``: what the executor does), or for real DDP the ``ddp``
    bucket plan."""
    plan = POLICIES["ddp"](problem) if run.plan is None else as_issued(problem, run.plan)
    return simulate_plan(problem, plan)


def compare(result: dict[str, Any], config: TrainConfig, workers: int) -> list[dict[str, Any]]:
    """Rows: measured and predicted iteration time (s) per policy and the relative error, and
    where the executor recorded rank 0's iteration, its backward and network-busy seconds
    beside the predicted ones (the simulated backward: longer than the profile's where
    messages in flight slow the compute) to see which part a prediction error comes from."""
    problem = problem_from_profile(result["profile"], config.network, workers)
    rows = []
    for run in result["runs"]:
        predicted = predict(run, problem)
        spans = run.timeline.spans
        recorded = bool(spans)
        rows.append({"model": config.model, "workers": workers, "network": config.network,
                     "policy": run.policy, "measured_s": run.measured_s,
                     "measured_iterations": len(run.iteration_s),
                     "predicted_s": predicted.time_s, "bound_s": predicted.bound_s,
                     "error": predicted.time_s / run.measured_s - 1.0,
                     "messages": len(predicted.plan.messages),
                     "measured_backward_s": sum(s.duration for s in spans
                                                if s.kind == "backward") if recorded else None,
                     "predicted_backward_s": max(s.end for s in predicted.timeline.spans
                                                 if s.kind == "backward"),
                     "measured_comm_s": sum(s.duration for s in spans
                                            if s.kind == "allreduce") if recorded else None,
                     "predicted_comm_s": predicted.row()["comm_busy_s"]})
    return rows
