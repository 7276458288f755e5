"""What is trained: layers, models, the zoo, compute models and profiles."""

from dlsched.models.compute import (
    CalibratedCompute,
    ComputeModel,
    Roofline,
    calibrated,
    device_compute,
    mfu,
    training_flops,
)
from dlsched.models.layer import Layer, Model
from dlsched.models.ops import Op
from dlsched.models.profile_io import load_profile
from dlsched.models.zoo import get_model, model_names

__all__ = [
    "CalibratedCompute",
    "ComputeModel",
    "Layer",
    "Model",
    "Op",
    "Roofline",
    "calibrated",
    "device_compute",
    "get_model",
    "load_profile",
    "mfu",
    "model_names",
    "training_flops",
]
