"""The op graph of a model is built once per search: the layouts' microbatch, TP, sequence
parallelism and recomputation only price it (issue 47 item 4)."""

from __future__ import annotations

import pytest

from dlsched.job.cluster import load_cluster
from dlsched.job.compute import layer_costs
from dlsched.job.evaluation.evaluate import Job, evaluate
from dlsched.job.execution import Execution
from dlsched.job.model_spec import bundled_specs
from dlsched.job.run_settings import RunSettings


def test_layouts_of_one_model_share_one_op_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight layouts of GPT-3 175B on 1,024 A100s (TP 4 or 8, microbatch 1 or 2, full or
    selective recomputation: eight different block prices) build the zoo decoder once; the
    kept graph equals a freshly built one."""
    built = []
    zoo_build = layer_costs.gpt_model

    def counted(*args: object, **kwargs: object) -> object:
        built.append(args[0])
        return zoo_build(*args, **kwargs)

    monkeypatch.setattr(layer_costs, "gpt_model", counted)
    layer_costs.decoder_model.cache_clear()
    layer_costs.block_costs.cache_clear()
    spec = bundled_specs()["gpt3-175b"]
    job = Job(spec, load_cluster("dgx-a100", 1024, None))
    layouts = [Execution(tp, 8, 1024 // (tp * 8), mb, 1536, recompute=recompute,
                         run=RunSettings("fp16"))
               for tp in (4, 8) for mb in (1, 2) for recompute in ("full", "selective")]
    seconds = {evaluate(job, layout).iteration_s for layout in layouts}
    assert len(seconds) == len(layouts)  # each layout priced on its own
    assert built == ["gpt3-175b"]
    kept = layer_costs.decoder_model(spec)
    assert kept is layer_costs.decoder_model(spec)
    assert kept == layer_costs.decoder_model.__wrapped__(spec)
