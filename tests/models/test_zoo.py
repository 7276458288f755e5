"""The model zoo matches the reference implementations' parameter tensors."""

import pytest

from dlsched.errors import ConfigError
from dlsched.models import get_model, model_names

# torchvision and Hugging Face (BertModel, GPT2Model) parameter counts.
PUBLISHED = {
    "vgg16": 138_357_544, "vgg19": 143_667_240, "resnet50": 25_557_032,
    "resnet101": 44_549_160, "resnet152": 60_192_808, "bert-base": 109_482_240,
    "bert-large": 335_141_888, "gpt2": 124_439_808, "gpt2-medium": 354_823_168,
    "gpt2-large": 774_030_080, "gpt2-xl": 1_557_611_200,
}
# Number of tensors in named_parameters().
TENSORS = {"vgg16": 32, "resnet50": 161, "resnet152": 467, "bert-base": 199, "gpt2": 148}


@pytest.mark.parametrize(("name", "count"), PUBLISHED.items())
def test_parameter_counts_equal_the_published_ones(name, count):
    """Sum of per-tensor parameters equals the reference implementation's count."""
    assert get_model(name).num_params == count


@pytest.mark.parametrize(("name", "count"), TENSORS.items())
def test_one_layer_per_parameter_tensor(name, count):
    """One layer per tensor, names unique."""
    model = get_model(name)
    assert len(model.layers) == count
    assert len({layer.name for layer in model.layers}) == count


def test_gpt3_like_model_has_175b_parameters_in_96_blocks():
    """GPT-3 shape: ~175B parameters and 96 transformer blocks."""
    model = get_model("gpt3-175b", dtype_bytes=2)
    assert 174e9 < model.num_params < 176e9
    assert len({layer.block for layer in model.layers if layer.block.startswith("h.")}) == 96
    assert model.gradient_bytes()[0] == 50257 * 12288 * 2


def test_forward_flops_match_known_totals():
    """ResNet-50 ~4.1 GMAC (8.2 GFLOP) and VGG-16 ~15.5 GMAC per 224x224 image; GPT-2 small
    ~2 x 124M FLOP per token plus attention and logits over 1024 tokens."""
    total = {n: sum(layer.forward_flops for layer in get_model(n).layers)
             for n in ("resnet50", "vgg16", "gpt2")}
    assert total["resnet50"] == pytest.approx(8.2e9, rel=0.03)
    assert total["vgg16"] == pytest.approx(31.0e9, rel=0.03)
    assert total["gpt2"] / 1024 == pytest.approx(2.85e8, rel=0.05)


def test_first_layers_and_order_follow_named_parameters():
    """Forward order with weight before bias, as named_parameters() lists them."""
    names = [layer.name for layer in get_model("resnet50").layers[:4]]
    assert names == ["conv1.weight", "bn1.weight", "bn1.bias", "layer1.0.conv1.weight"]
    assert get_model("vgg16").layers[-1].name == "classifier.6.bias"


def test_unknown_model_lists_accepted_names():
    """An unknown name raises ConfigError listing the zoo."""
    with pytest.raises(ConfigError, match="vgg16"):
        get_model("alexnet")
    assert "gpt2-xl" in model_names()


def test_megatron_cross_entropy_moves_13_fp32_passes_per_logit():
    """Megatron-LM's GPT casts its logits to FP32 before the cross-entropy: 13 FP32 passes per
    logit over forward and backward (52 B), in fp16 as under autocast; Hugging Face's loss op
    keeps 3 passes of the run's 16-bit elements forward and twice that backward (18 B)."""
    from dlsched.models.compute import calibrated
    from dlsched.models.pricing import op_work
    from dlsched.models.zoo import gpt_model

    seq, vocab = 128, 1000
    for megatron, expected in ((True, 13 * 4), (False, 3 * 2 * 3)):
        model = gpt_model("g", 64, 1, 4, seq, vocab, dtype_bytes=2, megatron=megatron)
        op = next(op for layer in model.layers for op in layer.ops
                  if op.label == "cross-entropy")
        compute = calibrated("a100", "fp16", autocast=False)
        seconds = op_work(compute, op, 1, False).gpu_s + op_work(compute, op, 1, True).gpu_s
        moved = seconds * compute.gpu.memory_rate
        assert moved == pytest.approx(expected * seq * vocab)
