"""What is trained: layers, models, the zoo, compute models and profiles."""

from dlsched.models.compute import (
    CALIBRATED,
    DEVICE_PEAKS,
    DEVICES,
    ComputeModel,
    Roofline,
    device_compute,
)
from dlsched.models.layer import Layer, Model
from dlsched.models.profile_io import load_profile
from dlsched.models.zoo import get_model, model_names

__all__ = [
    "CALIBRATED",
    "DEVICES",
    "DEVICE_PEAKS",
    "ComputeModel",
    "Layer",
    "Model",
    "Roofline",
    "device_compute",
    "get_model",
    "load_profile",
    "model_names",
]
