"""Differential check of the one network layer (issue 23, item 1): every simulator that shares
links gives, on seeded random cases, the numbers recorded before the four models were merged
(``benchmarks.network_cases``; the record was made at commit ec6e490)."""

from __future__ import annotations

import json

import pytest
from benchmarks.network_cases import CASES_PER_DOMAIN, DOMAINS, FIXTURE

RECORD = json.loads(FIXTURE.read_text())
# Domains whose arithmetic changed, with the relative tolerance and why. Collectives: a
# dimension shared by k > 1 transfers moved ``elapsed x bandwidth / n`` bytes per transfer and
# ended after ``left x n / bandwidth`` s (sim.SharedChannel); SharedLinks computes the rate
# ``bandwidth / n`` once and moves ``rate x elapsed``, ending after ``left / rate``: one seed
# of 16 moved (32 of 65 span ends, at most 1.9e-16 relative; its collective time did not).
MOVED = {"collectives": 1e-15}


@pytest.mark.parametrize("domain", sorted(DOMAINS))
@pytest.mark.parametrize("seed", range(CASES_PER_DOMAIN))
def test_same_numbers_as_recorded(domain: str, seed: int) -> None:
    expected = [float(v) for v in RECORD[domain][str(seed)]]
    got = DOMAINS[domain](seed)
    assert len(got) == len(expected)
    if domain in MOVED:
        assert got == pytest.approx(expected, rel=MOVED[domain], abs=0)
    else:
        assert got == expected
