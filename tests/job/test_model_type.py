"""One model type (issue 47): a model file, a bundled model, a ledger row's model section and the
evaluator's input are all ``job.model_spec.Model``, the zoo's ``DecoderShape`` extended."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.job import model_spec
from dlsched.job.model_spec import Model, bundled_specs, load_spec
from dlsched.ledger import load_ledger
from dlsched.models.zoo import DecoderShape, gpt_model


def test_every_front_end_gives_the_one_class() -> None:
    """No second model type or old name is left; a bundled model, a model file and a ledger
    row's model are instances of the one class; it extends the zoo's shape."""
    assert not hasattr(model_spec, "TransformerSpec")
    assert issubclass(Model, DecoderShape)
    assert not hasattr(model_spec, "TransformerFile")
    row = next(r for r in load_ledger("sc21") if r.id == "sc21-t1-gpt-1.7b")
    assert {type(bundled_specs()["gpt-1.7b"]), type(row.model)} == {Model}


def test_defaults_fill_from_the_sizes() -> None:
    """0 means the GPT default: ffn_hidden 4 x 64 = 256, kv_heads = heads = 4, head_dim 64 / 4
    = 16; positional fields as the dataclass took them."""
    model = Model("t", 2, 64, 4, 16, 100)
    assert (model.ffn_hidden, model.kv_heads, model.head_dim) == (256, 4, 16)
    assert model == Model(name="t", layers=2, hidden=64, heads=4, seq=16, vocab=100)


def test_a_file_and_a_bundled_entry_agree() -> None:
    """Llama 3 8B written as a file's document loads equal to the bundled entry (8,030,261,248
    parameters, the model card's 8.03B)."""
    bundled = load_spec("llama3-8b")
    again = Model.load(bundled.model_dump(), "my-llama.yaml")
    assert again == bundled and again.parameters() == 8_030_261_248


def test_refusals_are_one_line_and_name_the_field() -> None:
    """Bounds name the file and the field; relations keep their ``model: ...`` text, from a
    file and from a direct construction alike; a change is validated again."""
    with pytest.raises(ConfigError, match=r"^invalid my\.yaml: layers: Input should be greater "
                                          r"than or equal to 1 \(got 0\)$"):
        Model.load({"layers": 0, "hidden": 64, "heads": 4, "seq": 16, "vocab": 100}, "my.yaml")
    relation = r"^model: hidden 10 must be a multiple of heads 3 \(or head_dim given\)$"
    with pytest.raises(ConfigError, match=relation):
        Model.load({"layers": 1, "hidden": 10, "heads": 3, "seq": 16, "vocab": 100}, "my.yaml")
    with pytest.raises(ConfigError, match=relation):
        Model("t", 1, 10, 3, 16, 100)
    moe = Model("m", 2, 64, 4, 16, 100, experts=8, top_k=2)
    with pytest.raises(ConfigError, match=r"^model: top_k must be in 1\.\.experts = 8 \(got 9\)"):
        moe.replace(top_k=9)


def test_the_sources_spellings_are_the_files_fields() -> None:
    """``norm`` / ``position_embedding`` (as the ledger's sources print them) set ``rms_norm``
    / ``learned_positions``; giving both spellings of one field is refused."""
    sizes = {"layers": 1, "hidden": 64, "heads": 4, "seq": 16, "vocab": 100}
    model = Model(**sizes, norm="rmsnorm", position_embedding="rope")
    assert model.rms_norm and not model.learned_positions
    assert model.norm_parameters() == 64  # RMSNorm: a scale only
    with pytest.raises(ConfigError, match=r"^model: norm and rms_norm name one field"):
        Model(**sizes, norm="rmsnorm", rms_norm=True)
    with pytest.raises(ConfigError, match="accepted: layernorm, rmsnorm"):
        Model(**sizes, norm="batchnorm")


def test_a_zoo_decoder_reads_a_model_as_its_shape() -> None:
    """The zoo builds the same decoder from a Model as from a DecoderShape with the same base
    fields: Llama 3 8B's first layer's parameters (4096 x 6144 QKV + 4096^2 output + 3 x 4096
    x 14336 gated FFN + 2 x 4096 norms = 218,112,000)."""
    llama = load_spec("llama3-8b")
    base = DecoderShape(**{name: getattr(llama, name) for name in DecoderShape.model_fields})
    args = ("llama", llama.hidden, 1, llama.heads, 128, llama.vocab)
    from_model, from_base = gpt_model(*args, shape=llama), gpt_model(*args, shape=base)
    assert from_model.layers == from_base.layers
    block = sum(layer.params for layer in from_model.layers if layer.name.startswith("h.0."))
    assert block == llama.layer_parameters() == 218_112_000
