"""Differential check of the one network layer (issue 23, item 1): every simulator that shares
links gives, on seeded random cases, the numbers recorded before the four models were merged
(``benchmarks.network_cases``; the record was made at commit ec6e490)."""

from __future__ import annotations

import json

import pytest
from benchmarks.network_cases import CASES_PER_DOMAIN, DOMAINS, FIXTURE

RECORD = json.loads(FIXTURE.read_text())


@pytest.mark.parametrize("domain", sorted(DOMAINS))
@pytest.mark.parametrize("seed", range(CASES_PER_DOMAIN))
def test_same_numbers_as_recorded(domain: str, seed: int) -> None:
    expected = [float(v) for v in RECORD[domain][str(seed)]]
    got = DOMAINS[domain](seed)
    assert len(got) == len(expected)
    assert got == expected
