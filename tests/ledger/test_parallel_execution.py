"""A ledger row's ``parallel`` section is validated into the ``Execution`` the evaluator
prices, at load (``schema.LedgerRow.execution``): each field under its own name, the published
spellings mapped by the schema's validator, and ``ledger.predict`` hands it over as it is."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.job.execution import Execution
from dlsched.job.run_settings import RUN_DEFAULTS
from dlsched.ledger import load_ledger
from dlsched.ledger.predict import job_and_layout, predict_row
from dlsched.ledger.schema import by_row_key

ROWS = {row.id: row for row in load_ledger()}


def test_published_spellings_are_mapped_at_load() -> None:
    """TorchTitan's Table 1 FSDP + torch.compile row, by hand from its YAML: ``zero: fsdp`` is
    ZeRO 3 sharded as FSDP2, ``overlap: [dp_grad_reduce, dp_param_gather]`` DDP-style
    overlapped reduction and the overlapped parameter gather, no ``pp_p2p`` blocking pipeline
    transfers, ``torch_compile: true`` the ``compile`` setting, ``chunks: 1`` the 1F1B
    schedule; the other fields under their own names."""
    layout = ROWS["torchtitan-2412-t1-8b-fsdp-compile"].execution
    assert isinstance(layout, Execution)
    assert (layout.tp, layout.pp, layout.dp, layout.chunks, layout.schedule, layout.zero) == (
        1, 1, 8, 1, "1f1b", 3)
    assert (layout.microbatch_size, layout.global_batch, layout.recompute) == (
        2, 16, "selective-op")
    run = layout.run
    assert (run.sharding, run.dp_policy, run.overlap_param_gather, run.pipeline_p2p) == (
        "fsdp2", "ddp", True, "blocking")
    assert (run.compile, run.precision, run.attention) == (True, "bf16", "flash")
    plain = ROWS["torchtitan-2412-t1-8b-fsdp"].execution
    assert plain.run.compile is False and plain.row() == layout.row()


def test_the_evaluator_gets_the_rows_execution_as_it_is() -> None:
    """``job_and_layout`` returns the very object the validator made (no field-by-field copy);
    a Megatron row with interleaving and ZeRO 1 keeps the defaults it does not state."""
    row = ROWS["sc21-t1-gpt-76.1b"]
    _, layout = job_and_layout(row)
    assert layout is row.execution
    assert (layout.schedule, layout.chunks, layout.zero, layout.cp_algorithm) == (
        "interleaved", 3, 0, "ring")
    assert layout.run.sharding == RUN_DEFAULTS["sharding"]


def test_a_section_the_evaluator_cannot_hold_still_loads_and_is_refused_when_priced() -> None:
    """A row that does not publish its precision loads (the ledger keeps every published run);
    its execution is refused naming the field, and the row is reported with that reason."""
    unpublished = [row for row in ROWS.values() if row.parallel.precision is None]
    assert unpublished
    for row in unpublished:
        with pytest.raises(ConfigError, match="precision"):
            assert row.execution is None  # raises before


def test_torchtitan_405b_rows_run_torchtitans_default_pipeline() -> None:
    """TorchTitan 9dec370's defaults, by hand: 8 microbatches (the PP degree) of local batch 32
    (Table 5: 4 sequences each) or 8 (Table 6: 1); generate_split_points puts 126 // 8 = 15
    layers on the first stage and one of the 126 % 8 = 6 left over on each of the next six
    (splits at layers.15, 31, ..., 111), and for Interleaved 1F1B 2 stages per rank, 16 stages
    of 7, 8 x 14, 7 layers, stage s on rank s mod 8; rank 0 then holds 7 + 8 layers."""
    one = ROWS["torchtitan-2412-t5-405b-1f1b"].execution
    assert (one.num_microbatches, one.microbatch_size, one.schedule) == (8, 4, "1f1b")
    assert [len(span) for span in one.stage_layers(126)] == [15] + [16] * 6 + [15]
    assert one.stage_layers(126)[1] == range(15, 31)
    looped = ROWS["torchtitan-2412-t5-405b-interleaved-1f1b"].execution
    assert (looped.num_microbatches, looped.chunks, looped.schedule) == (8, 2, "interleaved")
    assert [len(span) for span in looped.stage_layers(126)] == [7] + [8] * 14 + [7]
    assert [looped.rank_layers(126, rank) for rank in (0, 1, 7)] == [15, 16, 15]
    for row_id in ("torchtitan-2412-t6-405b-fsdp8-cp1", "torchtitan-2412-t6-405b-fsdp1-cp8"):
        assert (ROWS[row_id].execution.num_microbatches,
                ROWS[row_id].execution.microbatch_size) == (8, 1)


def test_the_evaluators_refusals_name_the_rows_keys() -> None:
    """A refusal the evaluator names by field names the row's key in the row's reason
    (``schema.ROW_KEYS``), not ``dlsched plan``'s option: a CP 2 row whose sequence were 8,191
    tokens (2 x CP = 4 divides no odd length; ``job.context_parallel``, refused when priced)
    says ``parallel.cp``; a Qwen3-30B-A3B row on 8 GPUs (TP 1, DP 8, EP 8) with expert TP 2
    (expert TP x EP = 16 does not divide TP x CP x DP = 8; the Execution refuses it at load)
    says ``parallel.expert_tp``."""
    row = ROWS["megatron-bridge-2511-h100-llama3.1-405b-cp2"]
    odd = row.model_copy(update={"model": row.model.replace(seq=8191)})
    reasons = {p.reason for p in predict_row(odd)}
    assert reasons == {"parallel.cp: 2 needs the sequence (8191 tokens, --seq) to be a multiple "
                       "of 2 x CP = 4 (Megatron's load-balanced split); accepted: a CP with "
                       "2 x CP dividing 8191 (1)"}
    row = ROWS["mbridge-moe-2602-gb200-qwen3-30b-a3b-mxfp8"]
    folded = row.model_copy(update={"parallel": row.parallel.model_copy(
        update={"expert_tp": 2})})
    with pytest.raises(ConfigError, match=r"^mbridge-moe-2602-gb200-qwen3-30b-a3b-mxfp8: "
                                          r"parallel\.expert_tp: expert TP x EP = 16 must "
                                          r"divide TP x CP x DP = 8 ") as refused:
        job_and_layout(folded)
    assert refused.value.field is None  # the whole line, the row's id first
    assert by_row_key(ConfigError("x", "tp/pp")).field == "parallel.tp/parallel.pp"
    assert by_row_key(ConfigError("x", "schedule")).field == "parallel.chunks"
    assert by_row_key(ConfigError("x", "sharding")).field == "sharding"  # no key states it
