"""The shared validation layer: limits, safe file loading and output-path checks."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from dlsched.cli.paths import check_files
from dlsched.config import load_document, validate
from dlsched.errors import ConfigError
from dlsched.hardware import load_topology
from dlsched.validation import (
    BANDWIDTH,
    CHUNKS,
    LATENCY,
    MAX_CHUNKS,
    MAX_DOCUMENT_NODES,
    MAX_NESTING_DEPTH,
    Bandwidth,
    DimSize,
    Seconds,
    check_output_path,
    parse_document,
)

BAD_NUMBERS = [math.nan, math.inf, -math.inf, -1.0, 1e-300, 1e300]


@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_bandwidth_refuses_nan_inf_and_absurd_values(value: float) -> None:
    """NaN, ±inf, negative, 1e-300 B/s and 1e300 B/s are refused, naming the field."""
    with pytest.raises(ConfigError, match=r"--bw: .*accepted: a finite number >= 1 B/s"):
        BANDWIDTH.parse(value, "--bw")


@pytest.mark.parametrize("text", ["nan", "inf GB/s", "1e-300 B/s", "fast", "", "1e999 GB/s"])
def test_bandwidth_strings_are_refused(text: str) -> None:
    """Strings that are not finite bandwidths in range fail with the field name."""
    with pytest.raises(ConfigError, match="--bw"):
        BANDWIDTH.parse(text, "--bw")


def test_human_units_and_plain_numbers_keep_one_meaning() -> None:
    """Plain numbers are the internal unit (B/s, s); strings carry their unit."""
    assert BANDWIDTH.parse("100 Gb/s") == 12.5e9
    assert BANDWIDTH.parse(2e11) == 2e11
    assert LATENCY.parse("700 ns") == pytest.approx(7e-7)
    assert LATENCY.parse(0) == 0.0


def test_counts_are_integers_in_range() -> None:
    """Chunk counts above the limit, fractions and booleans are refused."""
    assert CHUNKS.parse("64") == 64
    assert CHUNKS.check(MAX_CHUNKS) == MAX_CHUNKS
    for bad in (0, MAX_CHUNKS + 1, 10**7, 2.5, True, math.nan, "many"):
        with pytest.raises(ConfigError, match="--chunks"):
            CHUNKS.parse(bad, "--chunks")


class _Link(BaseModel):
    bandwidth: Bandwidth
    latency: Seconds = 0.0
    size: DimSize = 2


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(),
                 st.text(max_size=12)))
def test_annotated_types_accept_only_finite_values_in_range(value: object) -> None:
    """Whatever the input, the model either validates to finite in-range numbers or raises
    ConfigError naming the field."""
    try:
        link = validate(_Link, {"bandwidth": value, "latency": value}, "link")
    except ConfigError as error:
        assert "bandwidth" in str(error) or "latency" in str(error)
        return
    assert math.isfinite(link.bandwidth) and 1 <= link.bandwidth <= 1e30
    assert math.isfinite(link.latency) and 0 <= link.latency <= 60


def test_deep_yaml_and_json_are_refused(tmp_path: Path) -> None:
    """5,000-deep nesting is a ConfigError naming the file, not a RecursionError."""
    for name, text in (("deep.yaml", "a: " + "[" * 5000 + "]" * 5000),
                       ("deep.json", "[" * 100_000 + "]" * 100_000)):
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ConfigError, match=f"{name}.*nested"):
            load_document(path)


def test_yaml_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    """Nine levels of nine aliases (9**9 values) are refused before anything is expanded."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 10):
        lines.append(f"a{level}: &a{level} [" + ", ".join([f"*a{level - 1}"] * 9) + "]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines))
    with pytest.raises(ConfigError, match=f"more than {MAX_DOCUMENT_NODES:,} values"):
        load_document(path)


def test_small_aliases_still_work() -> None:
    """Ordinary anchors and aliases load normally."""
    data = parse_document("base: &b {size: 4}\nother: *b\n", "doc")
    assert data == {"base": {"size": 4}, "other": {"size": 4}}
    depth = MAX_NESTING_DEPTH - 1
    assert parse_document("[" * depth + "]" * depth, "doc") == parse_document(
        "[" * depth + "]" * depth, "doc")


@pytest.mark.parametrize(("name", "content", "needle"), [
    ("net.yaml", bytes(range(256)), "binary file"),
    ("net.json", b"\xff\xfe name: x", "not UTF-8 text"),
    ("net.yaml", b"dims: [{kind: Ring, size: 4, bandwidth: 1e9, latency: .nan}]", "latency: nan"),
    ("net.json", b'{"dims": [{"kind": "Ring", "size": 4, "bandwidth": Infinity}]}',
     "bandwidth: inf"),
])
def test_odd_files_name_the_file(tmp_path: Path, name: str, content: bytes, needle: str) -> None:
    """Binary, non-UTF-8 and non-finite files give a ConfigError naming the file (API too)."""
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ConfigError) as error:
        load_topology(path)
    assert name in str(error.value) and needle in str(error.value)


def test_directory_and_missing_files(tmp_path: Path) -> None:
    """A directory is reported as a directory, a missing file as missing."""
    folder = tmp_path / "nets.yaml"
    folder.mkdir()
    with pytest.raises(ConfigError, match="is a directory"):
        load_topology(folder)
    with pytest.raises(ConfigError, match="does not exist"):
        load_topology(tmp_path / "missing.yaml")


def test_huge_ring_is_refused() -> None:
    """A Ring of 10**9 NPUs is out of range, naming the field and the limit."""
    with pytest.raises(ConfigError, match=r"dims\[0\]\.size.*<= 4,096"):
        validate_topology({"dims": [{"kind": "Ring", "size": 10**9, "bandwidth": "1 GB/s"}]})


def validate_topology(data: dict) -> object:
    """Build a topology from plain data (the file path's validation)."""
    from dlsched.hardware.topology_config import topology_from_data
    return topology_from_data(data)


def test_output_paths(tmp_path: Path) -> None:
    """Directories, /proc, paths under a file, wrong suffixes and duplicates are refused."""
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    for path, suffixes, needle in [
        (tmp_path, (".png",), "is a directory"),
        (Path("/proc/x"), (), "system folder"),
        (afile / "x.csv", (), "is a file, not a folder"),
        (tmp_path / "plot", (".png",), "ending in .png"),
    ]:
        with pytest.raises(ConfigError, match=needle):
            check_output_path(path, "--out", suffixes)
    assert check_output_path(tmp_path / "new" / "deeper" / "p.png", "--plot", (".png",))
    assert not (tmp_path / "new").exists()
    with pytest.raises(ConfigError, match="also given to --csv"):
        check_files({"--csv": (tmp_path / "r.csv", ()),
                            "--trace": (tmp_path / "." / "r.csv", ())})


def test_unit_errors_are_config_errors_and_network_strings_name_the_field() -> None:
    """The Python API raises the project's one error type; --network numbers name their part
    (and say 'network' once)."""
    from dlsched.dataparallel import parse_network
    from dlsched.units import UnitError, parse_time

    assert issubclass(UnitError, ConfigError)
    with pytest.raises(ConfigError):
        parse_time("5 fortnights")
    for text, needle in (("ring:10GB/s,nan", "network: step latency"),
                         ("nccl:inf,1us", "network: link bandwidth"),
                         ("tree:fast,1us", "network: link bandwidth"),
                         ("1ms,nan", "network: beta")):
        with pytest.raises(ConfigError, match=needle) as error:
            parse_network(text, 8)
        assert str(error.value).count("network:") == 1
