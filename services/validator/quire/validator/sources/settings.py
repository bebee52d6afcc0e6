"""How the validator fetches sources named by reference: one frozen record,
read once in ``main`` (``QUIRE_SOURCE_*`` and the job budget's reserve).

Only four of these are variables; the rest are the design's constants,
kept here so a test can shorten them:

- ``QUIRE_SOURCE_BREAKER_FAILURES`` (5): consecutive failed or timed-out
  calls to one tenant's source system that open its circuit breaker;
- ``QUIRE_SOURCE_BREAKER_OPEN_SECONDS`` (10): how long it stays open before
  one trial call is let through (half-open);
- ``QUIRE_SOURCE_CREDENTIALS_DIR`` (``<data dir>/source-credentials``): the
  only directory a ``file:`` credential reference may read (``credentials``);
- ``QUIRE_JOB_BUDGET_RESERVE_SECONDS`` (5): the end of a job's budget kept
  for render, signing and storage; sources are fetched before
  ``deadline - reserve`` (admission reads the same variable to refuse
  budgets too short for it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from quire.backoff import Backoff, Jitter
from quire.environment import CREDENTIAL_PREFIX, setting_float, setting_int, setting_text

__all__ = ["SourceSettings", "MIB"]

MIB = 1024 * 1024


@dataclass(frozen=True)
class SourceSettings:
    """How sources named by reference are fetched: breakers, tries, timeouts,
    sizes and the budget's reserve."""

    breaker_failures: int = 5
    """Consecutive failures (errors, timeouts, 408/429/5xx) that open a breaker."""
    breaker_open_seconds: float = 10.0
    """How long an open breaker refuses calls before one trial goes through."""
    budget_reserve_seconds: float = 5.0
    """The slice at the end of a job's budget that fetching never uses."""
    tries_per_delivery: int = 3
    """Calls for one source within one delivery before the job is deferred."""
    backoff_base_seconds: float = 0.2
    backoff_cap_seconds: float = 2.0
    """Between two tries of one call: uniform in [0, min(cap, base * 2**(n-1))] (full jitter)."""
    min_call_seconds: float = 0.5
    """The shortest call worth making: a budget with less left does not try."""
    default_timeout_seconds: float = 5.0
    """One call's longest wait when the system's registration says 0."""
    max_timeout_seconds: float = 60.0
    default_max_bytes: int = 16 * MIB
    """The most bytes one fetch may bring when the registration says 0."""
    systems_at_once: int = 4
    """Source systems one job fetches from at once (each system's sources in
    position order, one call at a time)."""
    max_connections: int = 64
    """The process's HTTP connection pool, all systems together."""
    credentials_dir: Path = Path(".quire") / "source-credentials"
    """The only directory ``file:`` credential references may read."""
    credential_variables: Mapping[str, str] = field(default_factory=dict, repr=False)
    """The ``QUIRE_SOURCE_CREDENTIAL_*`` variables the process started with:
    what ``env:`` credential references may name (never printed)."""

    @property
    def backoff(self) -> Backoff:
        """Between two tries of one call (full jitter)."""
        return Backoff(self.backoff_base_seconds, self.backoff_cap_seconds, Jitter.FULL)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SourceSettings:
        env = os.environ if env is None else env
        return cls(
            breaker_failures=setting_int(env, "QUIRE_SOURCE_BREAKER_FAILURES", 5, minimum=1),
            breaker_open_seconds=setting_float(
                env, "QUIRE_SOURCE_BREAKER_OPEN_SECONDS", 10, minimum=0.1
            ),
            budget_reserve_seconds=setting_float(
                env, "QUIRE_JOB_BUDGET_RESERVE_SECONDS", 5, minimum=0
            ),
            credential_variables={
                name: value for name, value in env.items() if name.startswith(CREDENTIAL_PREFIX)
            },
            credentials_dir=Path(
                setting_text(
                    env,
                    "QUIRE_SOURCE_CREDENTIALS_DIR",
                    str(Path(setting_text(env, "QUIRE_DATA_DIR", ".quire")) / "source-credentials"),
                )
            ),
        )
