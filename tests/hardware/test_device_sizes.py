"""Device files are refused on their sizes before any n x n matrix is built (issue 19, item 4):
3 servers of 4,096 GPUs took 19.5 s and 3.8 GB to be refused, and a topology form without
``count`` built matrices over every NPU of the topology (2**20: 2 TiB asked)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from dlsched.errors import ConfigError
from dlsched.hardware.device_config import devices_from_data

GPU = {"flops": "100 TFLOP/s", "memory": "80 GB"}
LINK = {"bandwidth": "100 GB/s"}


def _refused_in_little_memory(make: Callable[[], object], match: str) -> None:
    """``make()`` raises ConfigError matching ``match`` while Python allocates < 16 MB."""
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError, match=match):
            make()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20


@pytest.mark.parametrize("counts", [[4096, 4096, 4096], [4096, 1], [4096] * 8])
def test_total_gpus_of_all_servers_checked_first(counts: list[int]) -> None:
    """Each server within 4,096 GPUs, the total not."""
    data = {"servers": [{"count": c, "gpu": GPU, "link": LINK} for c in counts],
            "inter": {"bandwidth": "25 GB/s"}}
    _refused_in_little_memory(lambda: devices_from_data(data),
                              f"GPUs of all servers: GPU count {sum(counts)} is out of range; "
                              "accepted: an integer >= 1 and <= 4,096")


def test_too_many_servers_refused_by_the_schema() -> None:
    """5,000 one-GPU servers: refused for the list's length, naming the field."""
    data = {"servers": [{"count": 1, "gpu": GPU, "link": LINK}] * 5000,
            "inter": {"bandwidth": "25 GB/s"}}
    _refused_in_little_memory(lambda: devices_from_data(data), "servers")


def test_topology_form_checks_the_npu_count_first(tmp_path: Path) -> None:
    """A 4096 x 256 topology (2**20 NPUs) without ``count``, and with ``count`` 5,000."""
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump({"name": "big", "dims": [
        {"kind": "Switch", "size": 4096, "bandwidth": "100 GB/s", "latency": "1 us"},
        {"kind": "Switch", "size": 256, "bandwidth": "10 GB/s", "latency": "1 us"}]}))
    _refused_in_little_memory(lambda: devices_from_data({"topology": str(path), "gpu": GPU}),
                              "NPUs of big: GPU count 1048576 is out of range")
    _refused_in_little_memory(
        lambda: devices_from_data({"topology": str(path), "count": 5000, "gpu": GPU}),
        "count: GPU count 5000 is out of range")
