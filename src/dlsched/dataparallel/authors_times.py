"""The US-Byte authors' own compute inputs: forward times proportional to parameter count.

``--compute params-proportional``. The authors' public reference code (github.com/ZJU-CNLAB/
US-Byte, ``dist_trainer_US-Byte.py``, ``Get_t_f``) hard-codes one forward time per parameter
tensor, and every one of them is the same number of seconds per parameter: a total forward
time spread over the tensors by size, not a per-layer profile (VGG-16's fc6, 74% of the
parameters, gets 132 of its 178 ms). Their totals, the sums of those lists, are what this
module keeps — labelled as theirs, not measured here:

======== ============= ================ =================== ====================
model    tensors       parameters       forward total       seconds / parameter
======== ============= ================ =================== ====================
vgg16    32            138,357,544      177.632 ms          1.284e-9
resnet50 161           25,557,032       82.543 ms           3.230e-9
resnet152 467          60,192,808       323.611 ms          5.376e-9
======== ============= ================ =================== ====================

Their experiment configurations (``exp_configs``) train VGG-16 and ResNet-50 with 128 samples
per GPU and ResNet-152 with 32, so the totals are taken to hold at those batch sizes; another
batch size scales them linearly (our assumption, not the authors'). Backward times are measured
by their code at run time and not published: backward = ``backward_ratio`` x forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlsched.errors import ConfigError
from dlsched.models.layer import Model
from dlsched.validation import RATIO


@dataclass(frozen=True)
class AuthorsForward:
    """The authors' total forward seconds of a model at ``batch_size`` samples per GPU, over
    ``params`` parameters (the same count as the zoo's torchvision model)."""

    forward_s: float
    params: int
    batch_size: int

    @property
    def seconds_per_param(self) -> float:
        """Forward seconds per parameter at the authors' batch size."""
        return self.forward_s / self.params


SOURCE = ("US-Byte authors' reference code, github.com/ZJU-CNLAB/US-Byte, "
          "dist_trainer_US-Byte.py Get_t_f (sum of the per-tensor forward times)")
AUTHORS_FORWARD = {
    "vgg16": AuthorsForward(0.177632, 138_357_544, 128),
    "resnet50": AuthorsForward(0.082543, 25_557_032, 128),
    "resnet152": AuthorsForward(0.323611, 60_192_808, 32),
}


def authors_forward(model: str) -> AuthorsForward:
    """The authors' forward total for ``model``; ConfigError naming the models they give."""
    if model not in AUTHORS_FORWARD:
        raise ConfigError(f"compute: params-proportional uses the US-Byte authors' forward "
                          f"times, published for {', '.join(AUTHORS_FORWARD)} only (got "
                          f"{model!r}); accepted: one of those models, or --compute device")
    return AUTHORS_FORWARD[model]


@dataclass(frozen=True)
class ParamsProportional:
    """Layer times as the US-Byte authors give them: forward = the authors' seconds per
    parameter x the layer's parameters (scaled by batch size / the authors' batch size),
    backward = ``backward_ratio`` x forward."""

    backward_ratio: float = 2.0
    name: str = "params-proportional (US-Byte authors' forward times)"

    def __post_init__(self) -> None:
        RATIO.check(self.backward_ratio, "backward_ratio")

    def layer_times(self, model: Model, batch_size: int) -> tuple[list[float], list[float]]:
        """Forward and backward seconds of every layer of ``model`` at ``batch_size`` samples
        per GPU, in forward order."""
        source = authors_forward(model.name)
        if model.num_params != source.params:
            raise ConfigError(f"compute: model {model.name!r} has {model.num_params} "
                              f"parameters, the authors' {source.params}; accepted: the zoo's "
                              "model of that name, or --compute device")
        per_param = source.seconds_per_param * batch_size / source.batch_size
        forward = [per_param * layer.params for layer in model.layers]
        return forward, [self.backward_ratio * seconds for seconds in forward]
