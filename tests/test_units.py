"""Parsing of human units at the edges: one internal unit per quantity."""

import pytest

from dlsched.units import (
    UnitError,
    format_bandwidth,
    format_bytes,
    format_time,
    parse_bandwidth,
    parse_bytes,
    parse_flops,
    parse_time,
)


@pytest.mark.parametrize(("text", "expected"), [
    ("1 GiB", 2**30), ("100 MB", 100_000_000), ("4096", 4096), ("1.5kB", 1500),
    ("8 Gb", 10**9), (512, 512), ("2 TiB", 2 * 2**40),
])
def test_parse_bytes(text, expected):
    """Decimal prefixes are powers of ten, binary ones powers of two, lower-case b is bits."""
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("200 GB/s", 200e9), ("100 Gb/s", 12.5e9), ("25 Gbps", 3.125e9), ("1 GiB/s", 2.0**30),
    (5.0, 5.0),
])
def test_parse_bandwidth(text, expected):
    """Bandwidth is bytes per second inside."""
    assert parse_bandwidth(text) == pytest.approx(expected)


@pytest.mark.parametrize(("text", "expected"), [
    ("700 ns", 700e-9), ("20 us", 20e-6), ("1.5 ms", 1.5e-3), ("2 s", 2.0), (0.25, 0.25),
])
def test_parse_time(text, expected):
    """Time is seconds inside."""
    assert parse_time(text) == pytest.approx(expected)


def test_parse_flops():
    """Compute rates are FLOP/s inside."""
    assert parse_flops("312 TFLOP/s") == pytest.approx(312e12)
    assert parse_flops("19.5 TFLOPS") == pytest.approx(19.5e12)


@pytest.mark.parametrize(("parser", "text", "needle"), [
    (parse_bytes, "10 parsecs", "accepted"), (parse_bytes, "lots", "expected a number"),
    (parse_bandwidth, "200 GB", "per-second"), (parse_bandwidth, "3 furlongs/s", "accepted"),
    (parse_time, "5 fortnights", "accepted"), (parse_flops, "3 GHz", "accepted"),
])
def test_malformed_units_say_what_is_accepted(parser, text, needle):
    """A malformed quantity raises UnitError naming what is accepted."""
    with pytest.raises(UnitError, match=needle):
        parser(text)


def test_formatting_round_numbers():
    """Formatters pick a readable unit."""
    assert format_bytes(1.5e8) == "150 MB"
    assert format_time(0.0021) == "2.1 ms"
    assert format_bandwidth(2e11) == "200 GB/s"
