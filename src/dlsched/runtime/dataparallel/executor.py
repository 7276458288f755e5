"""Execute a dlsched data-parallel plan on torch.distributed: one executor for every policy.

Layer l of the plan is the module's l-th parameter in ``named_parameters()`` order. Every
``.grad`` is a view of one flat buffer (forward order), so autograd accumulates in place and a
message whose blocks are adjacent in that buffer is all-reduced as a view, without a copy; only
a message fusing non-adjacent blocks goes through a staging buffer (copy in, all-reduce, copy
back). A post-accumulate-grad hook marks each parameter's gradient ready; messages are issued
with ``all_reduce(async_op=True)`` strictly in plan order as soon as all their blocks are ready,
so every rank issues the same sequence (the plan is validated before training starts).

The update is applied lazily, per update group: a forward pre-hook of each module owning
parameters waits for the messages carrying its blocks (every message with a barrier plan),
then runs the optimizer of its group (one ``torch.optim`` instance per group, built by
``optimizer``) and zeroes the group's gradients (the recorded "update" span is the step and
the zeroing, after the wait). So the next forward overlaps the communication still in flight,
as US-Byte's phase 2 assumes. An update group is a run of consecutive owning modules
(``named_modules()`` order) whose messages have all arrived once the run's first module has
waited for its own (``update_groups``): updating them together at the first changes no wait,
only saves an optimizer call per module (about 50 us on the CPU with SGD; 27 owners of the
GPT benchmark: 1.2-1.8 ms of a 70-100 ms step); a barrier plan has one group. ``finish()``
applies whatever is still pending (call it before reading or saving the parameters).

A parameter whose gradient is accumulated twice (a tied embedding) fires its hook twice; the
first iteration counts the firings and issues every message after backward, later iterations
use the counts. Times are host perf counters (exact on the CPU).
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from dlsched.dataparallel.plan import DPPlan, validate_plan
from dlsched.dataparallel.problem import DPProblem
from dlsched.errors import ConfigError
from dlsched.runtime.dataparallel.profile import OptimizerFactory, parameter_owners
from dlsched.runtime.recorder import Clock, Recorder
from dlsched.sim.timeline import Timeline


@dataclass
class _Message:
    """One planned all-reduce: its element ranges in the flat buffer and its layers."""

    ranges: list[tuple[int, int]]
    layers: set[int]
    num_bytes: int
    buffer: torch.Tensor
    views: list[torch.Tensor] = field(default_factory=list)
    work: Any = None
    issued_s: float = 0.0
    done: tuple[Any, float] = (None, 0.0)  # (work, seconds its completion was seen)

    @property
    def done_s(self) -> float:
        """When the current work was seen complete (0 if not yet)."""
        work, seconds = self.done
        return seconds if work is self.work and work is not None else 0.0


def update_groups(needs: list[int]) -> list[list[int]]:
    """Owning modules (indices, forward order) grouped for their updates: ``needs[o]`` is how
    many messages (a prefix in issue order) module o waits for; a group starts at a module and
    takes the following ones that need no more than it does."""
    groups: list[list[int]] = []
    for owner, need in enumerate(needs):
        if groups and need <= needs[groups[-1][0]]:
            groups[-1].append(owner)
        else:
            groups.append([owner])
    return groups


def _element_ranges(plan_blocks: Any, offsets: list[int], element: int,
                    index: int) -> list[tuple[int, int]]:
    ranges = []
    for block in plan_blocks:
        if block.offset % element or block.length % element:
            raise ConfigError(f"plan: message m{index} block {block} is not aligned to the "
                              f"{element}-byte gradient elements")
        start = offsets[block.layer] + block.offset // element
        ranges.append((start, start + block.length // element))
    ranges.sort()
    return ranges


class _Watcher:
    """Stamps each message's completion from a thread of its own, in issue order.

    A Python callback on the work's future would run on gloo's worker thread and hold it until
    it gets the GIL, delaying every later all-reduce behind the training thread's Python code;
    this thread waits instead, so the communication threads never run Python."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[_Message, Any] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="dlsched-watcher", daemon=True)
        self._thread.start()

    def put(self, msg: _Message) -> None:
        """Watch ``msg`` (already issued)."""
        self._queue.put((msg, msg.work))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            msg, work = item
            try:
                work.wait()
            except RuntimeError:
                continue  # the training thread's own wait() raises it
            msg.done = (work, time.perf_counter())

    def stop(self) -> None:
        """Finish the watched messages and end the thread."""
        self._queue.put(None)
        self._thread.join()


class PlanExecutor:
    """Data-parallel training of ``module`` with ``plan`` (validated against ``problem``)."""

    def __init__(self, module: nn.Module, problem: DPProblem, plan: DPPlan,
                 optimizer: OptimizerFactory, record: bool = False) -> None:
        validate_plan(problem, plan)
        self.module, self.plan = module, plan
        self.parameters = [p for _, p in module.named_parameters()]
        self._check_problem(problem)
        self.world = dist.get_world_size()
        for tensor in [*self.parameters, *module.buffers()]:
            dist.broadcast(tensor.data, 0)
        self.flat, offsets = self._flat_gradients()
        element = self.parameters[0].element_size()
        self.messages = [self._message(_element_ranges(m.blocks, offsets, element, i),
                                       {b.layer for b in m.blocks}, m.num_bytes)
                         for i, m in enumerate(plan.messages)]
        self.of_layer: list[list[int]] = [[] for _ in self.parameters]
        for index, msg in enumerate(self.messages):
            for layer in msg.layers:
                self.of_layer[layer].append(index)
        owners = parameter_owners(module)
        self._names = {id(sub): name or "(root)" for name, sub in module.named_modules()}
        needs = [self._need(layers) for _, layers in owners]
        self.groups: list[tuple[list[int], torch.optim.Optimizer]] = []
        self._owner_group: dict[int, int] = {}
        self._group_owners: list[list[str]] = []
        self._group_need: list[int] = []
        for g, group in enumerate(update_groups(needs)):
            layers = [layer for o in group for layer in owners[o][1]]
            self.groups.append((layers, optimizer([self.parameters[i] for i in layers])))
            self._group_need.append(max(needs[o] for o in group))
            self._group_owners.append([self._names[id(owners[o][0])] for o in group])
            for o in group:
                self._owner_group[id(owners[o][0])] = g
        self.expected: list[int] | None = None
        self.recorder = Recorder(Clock(), f"rank{dist.get_rank()}") if record else None
        self.recording = record
        self._watcher = _Watcher() if record else None
        self._reset_iteration()
        self._pending_groups: set[int] = set()
        self._handles = [p.register_post_accumulate_grad_hook(self._hook(i))
                         for i, p in enumerate(self.parameters)]
        self._handles += [sub.register_forward_pre_hook(self._before_forward)
                          for sub, _ in owners]
        self._handles.append(module.register_forward_hook(self._after_forward))
        self.forward_ends: list[float] = []

    def _check_problem(self, problem: DPProblem) -> None:
        sizes = [p.numel() * p.element_size() for p in self.parameters]
        if list(problem.grad_bytes) != sizes:
            raise ConfigError(f"plan: its layers' gradient bytes {list(problem.grad_bytes)[:4]}"
                              f"... do not match the module's parameters {sizes[:4]}... "
                              f"({problem.num_layers} layers vs {len(sizes)} parameters)")
        kinds = {(p.dtype, p.device, p.requires_grad) for p in self.parameters}
        if len(kinds) != 1 or not next(iter(kinds))[2]:
            raise ConfigError(f"module: every parameter must share one dtype and device and "
                              f"require grad (got {sorted(map(str, kinds))})")

    def _flat_gradients(self) -> tuple[torch.Tensor, list[int]]:
        offsets, total = [], 0
        for p in self.parameters:
            offsets.append(total)
            total += p.numel()
        flat = torch.zeros(total, dtype=self.parameters[0].dtype,
                           device=self.parameters[0].device)
        for p, offset in zip(self.parameters, offsets, strict=True):
            p.grad = flat[offset:offset + p.numel()].view_as(p)
        return flat, offsets

    def _message(self, ranges: list[tuple[int, int]], layers: set[int],
                 num_bytes: int) -> _Message:
        contiguous = all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        if contiguous:
            return _Message(ranges, layers, num_bytes, self.flat[ranges[0][0]:ranges[-1][1]])
        views = [self.flat[a:b] for a, b in ranges]
        staging = torch.empty(sum(b - a for a, b in ranges), dtype=self.flat.dtype,
                              device=self.flat.device)
        return _Message(ranges, layers, num_bytes, staging, views)

    def _reset_iteration(self) -> None:
        self._fired = [0] * len(self.parameters)
        self._missing = [len(m.layers) for m in self.messages]
        self._next = 0
        self._waited = 0
        self._comm_free = 0.0
        self._backward_start: float | None = None
        self._forward_mark: tuple[float, str] | None = None
        self._ready_s = [0.0] * len(self.parameters)

    def _hook(self, layer: int) -> Callable[[torch.Tensor], None]:
        def hook(_: torch.Tensor) -> None:
            now = time.perf_counter()
            self._fired[layer] += 1
            self._ready_s[layer] = now
            if self.expected is not None and self._fired[layer] == self.expected[layer]:
                for index in self.of_layer[layer]:
                    self._missing[index] -= 1
                self._issue_ready()

        return hook

    def _issue_ready(self) -> None:
        while self._next < len(self.messages) and self._missing[self._next] == 0:
            self._issue(self.messages[self._next])
            self._next += 1

    def _issue(self, msg: _Message) -> None:
        if msg.views:
            torch.cat(msg.views, out=msg.buffer)
        msg.buffer.div_(self.world)
        msg.issued_s = time.perf_counter()
        msg.work = dist.all_reduce(msg.buffer, async_op=True)
        if self.recording and self._watcher is not None:
            self._watcher.put(msg)

    def _end_backward(self) -> None:
        """All of backward's hooks have fired: check every gradient came, issue the rest."""
        if self.expected is None:
            self.expected = list(self._fired)
            self._missing = [0] * len(self.messages)
        silent = [i for i, n in enumerate(self._fired) if n != self.expected[i] or n == 0]
        if silent:
            names = [n for i, (n, _) in enumerate(self.module.named_parameters()) if i in silent]
            raise RuntimeError(f"data-parallel executor: parameters {names[:5]} got "
                               f"{[self._fired[i] for i in silent[:5]]} gradient accumulations "
                               f"this iteration, expected {[self.expected[i] for i in silent[:5]]}"
                               "; every rank must use every parameter the same way each step")
        self._issue_ready()
        self._pending_groups = set(range(len(self.groups)))
        if self.recording:
            self._record_backward()
        self._backward_start = None

    def _wait(self, upto: int) -> None:
        while self._waited < upto:
            msg = self.messages[self._waited]
            msg.work.wait()
            if msg.views:
                offset = 0
                for view in msg.views:
                    view.copy_(msg.buffer[offset:offset + view.numel()])
                    offset += view.numel()
            if self.recording:
                start = max(self._comm_free, msg.issued_s)
                self._comm_free = max(start, msg.done_s or time.perf_counter())
                self.recorder.add_seconds("network", "allreduce", f"m{self._waited}", start,
                                          self._comm_free, msg.num_bytes, message=self._waited,
                                          layers=sorted(msg.layers))
            self._waited += 1

    def _need(self, layers: list[int]) -> int:
        """How many messages (a prefix in issue order) an update of ``layers`` waits for."""
        if self.plan.barrier:
            return len(self.messages)
        return 1 + max((index for layer in layers for index in self.of_layer[layer]),
                       default=-1)

    def _apply(self, groups: list[int]) -> float:
        """Wait for the messages ``groups`` need, then step and zero their gradients; the
        perf-counter seconds at which the wait ended (the update started)."""
        if not groups:
            return time.perf_counter()
        self._wait(max(self._group_need[g] for g in groups))
        stepped = time.perf_counter()
        for g in groups:
            self.groups[g][1].step()
            for layer in self.groups[g][0]:
                self.parameters[layer].grad.zero_()
            self._pending_groups.discard(g)
        return stepped

    def _mark_forward(self, now: float, label: str) -> None:
        if self.recording and self._forward_mark is not None:
            start, name = self._forward_mark
            self.recorder.add_seconds("gpu", "forward", f"F {name}", start, now)
        self._forward_mark = (now, label) if label else None

    def _before_forward(self, sub: nn.Module, _: Any) -> None:
        start = time.perf_counter()
        if self._backward_start is not None and any(self._fired):
            self._end_backward()
        self._mark_forward(start, "")
        group = self._owner_group[id(sub)]
        groups = [group] if group in self._pending_groups else []
        stepped = self._apply(groups)
        now = time.perf_counter()
        if self.recording and groups:
            self.recorder.add_seconds("gpu", "update", f"U {self._names[id(sub)]}", stepped,
                                      now, owners=self._group_owners[groups[0]])
        self._mark_forward(now, self._names[id(sub)])

    def _after_forward(self, *_: Any) -> None:
        self._apply(sorted(self._pending_groups))
        now = time.perf_counter()
        self._mark_forward(now, "")
        self.forward_ends.append(now)
        self._reset_iteration()
        self._backward_start = now

    def finish(self) -> None:
        """Wait for every message and apply every pending update (end of training)."""
        if self._backward_start is not None and any(self._fired):
            self._end_backward()
        self._apply(sorted(self._pending_groups))

    def set_recording(self, on: bool) -> None:
        """Record the spans (``on``) or not from the next hook on, e.g. only an iteration kept
        for its timeline, so the measured ones do not pay for the recording; needs an executor
        built with ``record=True``."""
        if on and self.recorder is None:
            raise ConfigError("record: the executor was built with record=False")
        self.recording = on

    def _record_backward(self) -> None:
        assert self.recorder is not None and self._backward_start is not None
        previous = self._backward_start
        names = [n for n, _ in self.module.named_parameters()]
        for layer in sorted(range(len(self.parameters)), key=lambda i: self._ready_s[i]):
            end = max(previous, self._ready_s[layer])
            self.recorder.add_seconds("gpu", "backward", f"B {names[layer]}", previous, end,
                                      layer=layer)
            previous = end

    def timeline(self) -> Timeline:
        """The recorded spans, seconds after the first forward's end."""
        if self.recorder is None:
            raise ConfigError("record: the executor was built with record=False")
        return self.recorder.timeline(self.forward_ends[0])

    def close(self) -> None:
        """Remove every hook (the module goes back to plain training); stop the watcher."""
        for handle in self._handles:
            handle.remove()
        if self._watcher is not None:
            self._watcher.stop()
