"""``dlsched plan``'s mistakes refused with their own cause before any search: each names its
field (``ConfigError.field``; the CLI says its option: tests/cli/test_exit_codes) and what is
accepted, in one line, and the search is never entered."""

from __future__ import annotations

import pytest

from dlsched.errors import ConfigError
from dlsched.job import api
from dlsched.job.scenario import PlanScenario

LLAMA = {"model": "llama3-70b", "cluster": "dgx-h100", "gpus": 64, "global_batch": 256}
COMPLETE = {"chunks": 1, "microbatch_size": 1, "schedule": "1f1b", "recompute": "full",
            "zero": 1}


@pytest.mark.parametrize(("given", "message"), [
    ({"gpus": 1}, "gpus: 1 GPU leaves no parallel layout"),
    ({"gpus": 12}, "gpus: 12 is more than one dgx-h100 node and not whole nodes of 8"),
    ({"gpus": 65536}, "gpus: 65,536 is 8,192 nodes, more than the 4,096"),
    ({"tp": 8, "pp": 4, "dp": 4, "cp": 1}, "tp/cp/pp/dp: TP x CP x PP x DP = "
                                          "8 x 1 x 4 x 4 = 128 GPUs, not the 64 of --gpus"),
    ({"tp": 8, "pp": 16}, "tp/pp: TP x PP = 8 x 16 = 128 does not divide the 64 GPUs"),
    ({"tp": 16}, "tp: 16 does not divide llama3-70b's 64 attention heads and 8 KV heads"),
    ({"tp": 64, "model": "gpt3-175b"}, "tp: 64 does not divide gpt3-175b's 96"),
    ({"ep": 2}, "ep: 2 on llama3-70b, a dense model"),
    ({"ep": 16, "model": "mixtral-8x7b"}, "ep: 16 does not divide mixtral-8x7b's 8 experts"),
    ({"expert_tp": 2}, "expert_tp: 2 on llama3-70b, a dense model"),
    # 14336 = 2^11 x 7: 3 divides none of it (Mixtral 8x7B's released intermediate_size)
    ({"expert_tp": 3, "model": "mixtral-8x7b"}, "expert_tp: 3 does not divide "
                                                "mixtral-8x7b's experts' FFN width 14336; "
                                                "accepted: a divisor of it (1, 2, 4, 7, 8,"),
    # 2 x CP = 4 does not divide 8190 = 2 x 4095; CP 3 does (2 x 3 = 6 divides 8190)
    ({"cp": 2, "seq": 8190}, "cp: 2 needs the sequence (8190 tokens, --seq) to be a "
                             "multiple of 2 x CP = 4"),
    ({"cp": 2, "seq": 8191}, "cp: 2 needs the sequence (8191 tokens, --seq) to be a "
                             "multiple of 2 x CP = 4 (Megatron's load-balanced split); "
                             "accepted: a CP with 2 x CP dividing 8191 (1)"),
    ({"pp": 32, "chunks": 1}, "pp: PP x chunks = 32 x 1 splits none of llama3-70b's 80"),
    ({"dp": 16, "microbatch_size": 3}, "global_batch: 256 is not a multiple of "
                                       "--microbatch-size 3 x --dp 16 = 48"),
    # 4,096 microbatches x microbatch 8 x DP 64 (all 64 GPUs) = 2,097,152 sequences at most
    ({"global_batch": 2_097_152 * 2}, "global_batch: 4,194,304 sequences are more than "
                                      "4,096 microbatches per replica at microbatch size x "
                                      "DP = 512, the most this job takes; accepted: at most "
                                      "2,097,152"),
    ({"schedule": "interleaved", "chunks": 1}, "chunks: 1 chunk(s) per rank with --schedule "
                                               "interleaved, which runs several per rank; "
                                               "accepted: 2 or more"),
    ({"schedule": "1f1b", "chunks": 2}, "chunks: 2 chunk(s) per rank with --schedule 1f1b, "
                                        "which runs one per rank; accepted: 1 (or --schedule "
                                        "interleaved)"),
    ({"tp_comm_overlap": True, "sequence_parallel": False}, "tp_comm_overlap: overlaps"),
    ({"tp_comm_overlap": True, "tp": 1}, "tp_comm_overlap: overlaps"),
    ({"overlap_param_gather": True, "zero": 0}, "overlap_param_gather: overlaps"),
    ({"overlap_param_gather": True, "zero": 3}, "overlap_param_gather: overlaps ZeRO 1-2"),
    ({"sharding": "fsdp2-split", "zero": 1}, "sharding: fsdp2-split prices ZeRO 3 as "
                                             "PyTorch's FSDP2; with --zero 1 it would be"),
    ({"gpu": "h9000"}, "gpu: unknown GPU 'h9000'; accepted: h100")])
def test_each_mistake_is_refused_with_its_own_cause(given, message, monkeypatch):
    """The message starts with the field at fault (also ``ConfigError.field``), says what is
    accepted, is one line, and comes before the search (which would only say that no layout
    fits)."""
    def no_search(*args, **kwargs):
        raise AssertionError("searched")

    monkeypatch.setattr(api, "search", no_search)
    with pytest.raises(ConfigError) as refused:
        PlanScenario(**(LLAMA | given)).run()
    text = str(refused.value)
    assert text.startswith(message.split(":")[0] + ":") and message in text, text
    assert refused.value.field == message.split(":")[0]
    assert "accepted" in text and "\n" not in text


def test_a_broken_gpu_file_names_its_field(tmp_path):
    """A GPU file with an unparsable peak: the error names gpu, the file and the field."""
    path = tmp_path / "broken.yaml"
    path.write_text("name: broken\npeak: {bf16: fast}\n")
    with pytest.raises(ConfigError, match=r"^gpu: .*peak\.bf16: cannot parse 'fast'"):
        PlanScenario(**(LLAMA | {"gpu": str(path)})).run()


@pytest.mark.parametrize("gpus", [2, 7, 8, 32768])
def test_what_gpus_accepts_gets_past_the_checks(gpus):
    """2 to 8 GPUs of one node and whole nodes up to 4,096 pass ``--gpus``'s check (7 used to
    fail on the NVSwitch dimension's halving-doubling); a complete layout is then priced."""
    from dlsched.job.refusals import check_gpus

    check_gpus("dgx-h100", gpus)
    if gpus == 7:
        row, = PlanScenario(model="gpt-1.7b", cluster="dgx-h100", gpus=7, global_batch=14,
                            tp=1, pp=1, dp=7, **COMPLETE | {"zero": 0}).run().rows
        assert row["layout"].startswith("TP1 PP1 DP7")


def test_the_defaults_behind_a_row_are_printed_with_it():
    """Global batch, attention kernel and a topology's GPU, when defaults, are named in the
    notes; given ones are not."""
    notes = PlanScenario(model="gpt-1.7b", cluster="3D-FC_Ring_SW", tp=4, pp=4, dp=64,
                         **COMPLETE).run().notes
    assert any(n.startswith("global batch: 1536 sequences, the default") for n in notes)
    assert any(n.startswith("attention core: flash, the default") for n in notes)
    assert any(n.startswith("GPU: a100, the default for a topology cluster") for n in notes)
    given = PlanScenario(model="gpt-1.7b", cluster="3D-FC_Ring_SW", tp=4, pp=4, dp=64,
                         global_batch=1024, attention="unfused", gpu="h100",
                         **COMPLETE).run().notes
    assert not any(n.startswith(("global batch:", "attention core:", "GPU:")) for n in given)
