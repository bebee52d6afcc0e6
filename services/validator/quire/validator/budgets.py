"""How much sandbox time one validation may take, and where it runs.

A task's budget scales with what it opens: ``base + per MiB × size + per page
× pages`` seconds of CPU (and ``wall_factor`` times that of wall clock, only a
backstop for a worker that stops being runnable: time it waits for a CPU on
a busy machine is charged as CPU, not by the clock), so a 50 KiB file that spins is killed
in a few seconds while a 20 MiB scan keeps the full time, and an ordinary
file is not rejected because its neighbours held the cores. The
pool's own limits stay the hard ceilings. A task that exhausts its budget in
the shared pool is retried at once in the quarantine lane (its own workers
and limits) with ``quarantine_scale`` times the budget, and never less than
``quarantine_floor_seconds`` of CPU.

The shared lane's budget is about fairness, not verdicts: exhausting it only
moves the file aside. The verdict ``PARSER_LIMIT_EXCEEDED`` comes from the
quarantine lane, whose floor sits far above what any ordinary file takes
(the corpus's slowest inspection is under 0.2 s of CPU), so CPU time that a
busy machine inflates by a third does not turn one file's verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from quire.environment import Settings, Variable
from quire.sandbox import Budget

__all__ = ["BudgetRule", "MIB"]

MIB = 1024 * 1024


class BudgetRule(Settings):
    """How a task's sandbox budget is worked out from its size and pages, in each
    lane; the pool's own limits still cap it."""

    model_config = SettingsConfigDict(env_prefix="QUIRE_VALIDATOR_")

    base_seconds: Annotated[float, Variable("QUIRE_VALIDATOR_BUDGET_BASE_SECONDS")] = Field(
        default=0.25, ge=0
    )
    """A quarter of a second: a small ordinary file's checks take milliseconds
    (0.2 ms for a one-page text PDF; the corpus's slowest validation, repair
    included, is well under this), while a small hostile one holds a shared
    worker, at full CPU priority, for the whole budget before it moves to
    quarantine. ``make bench-quarantine`` (36 ordinary jobs, then 36 more
    with 4 hostile ones, 2 cores): ordinary p99 mixed/clean 3.00x with 1 s
    and hostile jobs holding their pull slots, 2.31x at 0.5 s once they give
    them back, 1.84-1.88x at 0.25 s with the quarantine worker at nice 19."""
    seconds_per_mib: Annotated[float, Variable("QUIRE_VALIDATOR_BUDGET_SECONDS_PER_MIB")] = Field(
        default=2.0, ge=0
    )
    """CPU seconds added per MiB of the document."""
    seconds_per_page: Annotated[float, Variable("QUIRE_VALIDATOR_BUDGET_SECONDS_PER_PAGE")] = Field(
        default=0.05, ge=0
    )
    """CPU seconds added per page."""
    wall_factor: Annotated[float, Variable("QUIRE_VALIDATOR_BUDGET_WALL_FACTOR")] = Field(
        default=10.0, ge=0
    )
    """The wall-clock backstop as a multiple of the CPU budget: far above it,
    so a worker blocked a moment on a busy machine's disk is not stopped for
    it, and the verdict stays the CPU budget's."""
    quarantine_scale: Annotated[float, Variable("QUIRE_VALIDATOR_QUARANTINE_BUDGET_SCALE")] = Field(
        default=3.0, ge=0
    )
    """The quarantine lane's budget, as a multiple of the shared lane's."""
    quarantine_floor_seconds: float = Field(default=4.0, ge=0)
    """The least CPU time the quarantine lane gives a task (the pool's own
    limit still caps it): the line a verdict is drawn at."""
    quarantine_wait_seconds: float = Field(default=120.0, ge=0)
    """How long a task waits for a free quarantine worker before it is retried later."""
    quarantine_slots: int = Field(default=4, ge=0)
    """How many jobs may wait on the quarantine lane having given their stage
    pull slot back (``quire.workqueue.worker.step_aside``), so that ordinary
    jobs are pulled meanwhile; past that, a quarantined job keeps its slot."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> BudgetRule:
        return cls.read(env)

    def budget(self, size_bytes: int, pages: int = 0) -> Budget:
        """The shared lane's budget for opening ``size_bytes`` over ``pages`` pages
        (uncapped here: the pool caps it at its configured limits)."""
        seconds = (
            self.base_seconds
            + self.seconds_per_mib * max(0, size_bytes) / MIB
            + self.seconds_per_page * max(0, pages)
        )
        return Budget(cpu_seconds=seconds, wall_seconds=self.wall_factor * seconds)

    def quarantine(self, size_bytes: int, pages: int = 0) -> Budget:
        scaled = self.budget(size_bytes, pages).scaled(self.quarantine_scale)
        if scaled.cpu_seconds >= self.quarantine_floor_seconds:
            return scaled
        floor = self.quarantine_floor_seconds
        return Budget(cpu_seconds=floor, wall_seconds=self.wall_factor * floor)
