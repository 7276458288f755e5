"""``ConfigError``'s field kept apart from its reason, and an edge's names for it."""

from __future__ import annotations

import pickle

from dlsched.errors import ConfigError


def test_an_edge_names_the_field_its_own_way() -> None:
    """One field, fields given together (each renamed, joined by '/'), and the cases left as
    they are: no field, or a field the edge's names lack."""
    names = {"tp": "--tp", "pp": "--pp", "gpus": "--gpus"}
    assert str(ConfigError("12 is not whole nodes", "gpus").named_by(names)) == \
        "--gpus: 12 is not whole nodes"
    both = ConfigError("32 x 2 GPUs are more than 8", "tp/pp").named_by(names)
    assert (str(both), both.field, both.reason) == (
        "--tp/--pp: 32 x 2 GPUs are more than 8", "--tp/--pp", "32 x 2 GPUs are more than 8")
    whole = ConfigError("size: too big")
    assert whole.named_by(names) is whole and whole.field is None
    unknown = ConfigError("bad", "tp/zero")
    assert unknown.named_by(names) is unknown


def test_two_fields_named_alike_are_named_once() -> None:
    """Two fields a row states under one key (the schedule by its chunks) name it once."""
    keys = {"schedule": "parallel.chunks", "chunks": "parallel.chunks"}
    assert str(ConfigError("zb-v runs 2", "schedule/chunks").named_by(keys)) == \
        "parallel.chunks: zb-v runs 2"


def test_the_field_survives_pickling() -> None:
    """A refusal raised in a worker process reaches the parent with its field."""
    error = pickle.loads(pickle.dumps(ConfigError("unknown GPU 'x'", "device")))
    assert (error.field, error.reason, str(error)) == ("device", "unknown GPU 'x'",
                                                      "device: unknown GPU 'x'")
