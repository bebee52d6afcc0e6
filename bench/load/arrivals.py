"""Open-loop arrival schedules: sustained plateaus and bursts, per class in a mix.

Arrival times within a phase are a Poisson process at the phase's rate (seeded,
so a run is repeatable); classes are dealt by smooth weighted round robin so
that every phase carries the mix exactly, however short it is. The driver
submits each job at its scheduled time whether or not earlier ones finished.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Phase", "Arrival", "schedule", "parse_mix"]


@dataclass(frozen=True)
class Phase:
    name: str
    kind: str  # "plateau", "burst" or "drain" (no arrivals)
    seconds: float
    rate: float  # jobs per second, all classes together


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds after the load phase starts
    cls: str
    phase: str


def parse_mix(text: str) -> dict[str, float]:
    """``contract=0.4,invoice=0.3`` -> shares that sum to 1."""
    mix: dict[str, float] = {}
    for part in text.split(","):
        if part.strip():
            name, _, share = part.partition("=")
            mix[name.strip()] = float(share)
    total = sum(mix.values())
    return {name: share / total for name, share in mix.items() if share > 0}


def _dealer(mix: dict[str, float]):  # type: ignore[no-untyped-def]
    credit = dict.fromkeys(mix, 0.0)
    while True:
        for name, share in mix.items():
            credit[name] += share
        best = max(credit, key=lambda name: credit[name])
        credit[best] -= 1.0
        yield best


def schedule(phases: list[Phase], mix: dict[str, float], seed: int = 14) -> list[Arrival]:
    rng = random.Random(seed)
    deal = _dealer(mix)
    arrivals: list[Arrival] = []
    start = 0.0
    for phase in phases:
        if phase.rate > 0:
            at = start + rng.expovariate(phase.rate)
            while at < start + phase.seconds:
                arrivals.append(Arrival(at, next(deal), phase.name))
                at += rng.expovariate(phase.rate)
        start += phase.seconds
    return arrivals
