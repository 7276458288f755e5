"""Shared links: transfers sent together (``send_each``) and kept as twins end at the same
times, bit for bit, and in the same order as the same transfers sent one event each."""

from __future__ import annotations

import random

import pytest

from dlsched.sim import Engine
from dlsched.sim.links import SharedLinks


def test_twins_split_when_one_shares_a_link():
    """A and B, 100 B each on their own 10 B/s links, sent together at t=0 (twins); at t=2
    C (40 B) joins A's link: A and C move 5 B/s, C ends at t=10, A has 40 B left then and
    ends at t=14; B, alone throughout, ends at t=10."""
    engine = Engine()
    links = SharedLinks(engine, {"a": 10.0, "b": 10.0})
    done: dict[str, float] = {}
    inf = float("inf")

    def mark(name: str):
        return lambda: done.__setitem__(name, engine.now)

    links.send_each([(100.0, ("a",), mark("A"), inf, "A"), (100.0, ("b",), mark("B"), inf, "B")])
    assert links.count == 2
    assert len(links.active) == 1  # one in flight carrying its twin
    engine.at(2.0, links.send, 40.0, ("a",), mark("C"))
    engine.run()
    assert done == {"A": pytest.approx(14.0), "B": pytest.approx(10.0),
                    "C": pytest.approx(10.0)}


def _random_case(seed: int) -> tuple[dict, list[tuple[float, list[tuple]]], int | None]:
    """Rings of equal transfers over NIC pairs and single-link pairs, with single transfers
    joining the same resources at random times (some equal in time to a ring's start)."""
    rng = random.Random(seed)
    gpus = rng.randint(2, 6)
    capacity = {("out", g): rng.choice([10.0, 12.5, 25.0]) for g in range(gpus)}
    capacity |= {("in", g): rng.choice([10.0, 12.5, 25.0]) for g in range(gpus)}
    capacity |= {("link", g): rng.choice([10.0, 50.0]) for g in range(gpus)}
    groups = []
    for _ in range(rng.randint(1, 8)):
        at = rng.choice([0.0, 1.0, 2.5, rng.uniform(0, 10)])
        size = rng.choice([8.0, 20.0, 1e-12, rng.uniform(1, 60)])
        sends = []
        for g in range(rng.randint(1, gpus)):
            nxt = (g + 1) % gpus
            resources = (("link", g),) if rng.random() < 0.3 else (("out", g), ("in", nxt))
            cap = rng.choice([float("inf"), 10.0, 12.5])
            sends.append((size if rng.random() < 0.8 else rng.uniform(1, 60), resources,
                          cap, rng.choice([("ring", g), ("p2p", g)])))
        groups.append((at, sends))
    return capacity, groups, rng.choice([None, 1, 2])


def _ends(seed: int, together: bool) -> list[tuple[int, int, float]]:
    capacity, groups, in_flight = _random_case(seed)
    engine = Engine()
    links = SharedLinks(engine, capacity, in_flight)
    ends: list[tuple[int, int, float]] = []
    for k, (at, sends) in enumerate(groups):
        batch = [(size, resources, lambda k=k, i=i: ends.append((k, i, engine.now)), cap,
                  stream) for i, (size, resources, cap, stream) in enumerate(sends)]
        if together:
            engine.at(at, links.send_each, batch)
        else:
            for entry in batch:
                engine.at(at, links.send, *entry)
    engine.run()
    return ends


@pytest.mark.parametrize("seed", range(200))
def test_send_each_gives_what_one_send_each_gives(seed: int):
    """Same end times (==) in the same order, with or without twins."""
    assert _ends(seed, together=True) == _ends(seed, together=False)
