"""A sandbox worker that dies is replaced, and each replacement is counted
(``quire_sandbox_worker_restarts_total``); a worker's first start is not."""

from __future__ import annotations

import os

import pytest

from quire.metrics import ServiceMetrics
from quire.sandbox import SandboxExhausted, SandboxPool
from quire.settings import SandboxSettings


def _die() -> None:
    os._exit(3)


def _fine() -> str:
    return "ok"


async def test_a_dead_worker_is_replaced_and_counted() -> None:
    metrics = ServiceMetrics("validator")
    counter = metrics.counter("quire_sandbox_worker_restarts_total").labels(stage="validate")
    pool = SandboxPool(SandboxSettings(workers=1, cpu_seconds=5, wall_seconds=10))
    pool.count_replacements(counter.inc)

    def restarts() -> float | None:
        return metrics.registry.get_sample_value(
            "quire_sandbox_worker_restarts_total", {"stage": "validate"}
        )

    try:
        await pool.warm()
        assert await pool.run(_fine) == "ok"
        assert restarts() == 0, "the first start is not a restart"
        with pytest.raises(SandboxExhausted):
            await pool.run(_die)
        assert await pool.run(_fine) == "ok", "a new worker took the dead one's place"
        assert restarts() == 1
    finally:
        pool.close()
