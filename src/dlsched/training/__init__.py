"""Whole training iterations of hybrid-parallel workloads on multi-dimensional networks."""

from dlsched.training.groups import SubTopology, subtopology
from dlsched.training.iteration import IterationRun, simulate_iterations
from dlsched.training.policies import POLICY_ALIASES, TRAINING_POLICIES, TrainingPolicy
from dlsched.training.run import TrainingResult, run_policies, run_training
from dlsched.training.step import starved_note, step_row
from dlsched.training.workload import Comm, Workload, WorkloadLayer
from dlsched.training.workloads import WORKLOADS, get_workload

__all__ = [
    "POLICY_ALIASES",
    "TRAINING_POLICIES",
    "WORKLOADS",
    "Comm",
    "IterationRun",
    "SubTopology",
    "TrainingPolicy",
    "TrainingResult",
    "Workload",
    "WorkloadLayer",
    "get_workload",
    "run_policies",
    "run_training",
    "simulate_iterations",
    "starved_note",
    "step_row",
    "subtopology",
]
