"""How the validator fetches sources named by reference: one frozen record,
read once in ``main`` (``QUIRE_SOURCE_*`` and the job budget's reserve).

Four fields are variables; those marked ``Given`` are the design's
constants, kept here so a test can shorten them. The job budget's reserve
(``QUIRE_JOB_BUDGET_RESERVE_SECONDS``) is the end of a job's budget kept for
render, signing and storage: sources are fetched before ``deadline -
reserve``, and admission reads the same variable to refuse budgets too short
for it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from quire.backoff import Backoff, Jitter
from quire.environment import CREDENTIAL_PREFIX, Given, Settings, Variable

__all__ = ["SourceSettings", "MIB"]

MIB = 1024 * 1024


class SourceSettings(Settings):
    """How sources named by reference are fetched: breakers, tries, timeouts,
    sizes and the budget's reserve."""

    model_config = SettingsConfigDict(env_prefix="QUIRE_SOURCE_")

    breaker_failures: int = Field(default=5, ge=1)
    """Consecutive failures (errors, timeouts, 408/429/5xx) that open a breaker."""
    breaker_open_seconds: float = Field(default=10.0, ge=0.1)
    """How long an open breaker refuses calls before one trial goes through."""
    budget_reserve_seconds: Annotated[float, Variable("QUIRE_JOB_BUDGET_RESERVE_SECONDS")] = Field(
        default=5.0, ge=0
    )
    """The slice at the end of a job's budget that fetching never uses."""
    tries_per_delivery: Annotated[int, Given()] = 3
    """Calls for one source within one delivery before the job is deferred."""
    backoff_base_seconds: Annotated[float, Given()] = 0.2
    """The first retry of a call waits up to this."""
    backoff_cap_seconds: Annotated[float, Given()] = 2.0
    """Between two tries of one call: uniform in [0, min(cap, base * 2**(n-1))] (full jitter)."""
    min_call_seconds: Annotated[float, Given()] = 0.5
    """The shortest call worth making: a budget with less left does not try."""
    default_timeout_seconds: Annotated[float, Given()] = 5.0
    """One call's longest wait when the system's registration says 0."""
    max_timeout_seconds: Annotated[float, Given()] = 60.0
    """The longest a registration may let one call wait."""
    default_max_bytes: Annotated[int, Given()] = 16 * MIB
    """The most bytes one fetch may bring when the registration says 0."""
    systems_at_once: Annotated[int, Given()] = 4
    """Source systems one job fetches from at once (each system's sources in
    position order, one call at a time)."""
    max_connections: Annotated[int, Given()] = 64
    """The process's HTTP connection pool, all systems together."""
    credentials_dir: Path = Path(".quire") / "source-credentials"
    """The only directory ``file:`` credential references may read (a Secret
    mounted there in a cluster): ``<data dir>/source-credentials`` unless set."""
    credential_variables: Annotated[Mapping[str, str], Given()] = Field(
        default_factory=dict, repr=False
    )
    """The ``QUIRE_SOURCE_CREDENTIAL_*`` variables the process started with:
    what ``env:`` credential references may name (never printed)."""

    @property
    def backoff(self) -> Backoff:
        """Between two tries of one call (full jitter)."""
        return Backoff(self.backoff_base_seconds, self.backoff_cap_seconds, Jitter.FULL)

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, data_dir: Path | None = None
    ) -> SourceSettings:
        """The settings, and the ``QUIRE_SOURCE_CREDENTIAL_*`` variables."""
        env = os.environ if env is None else env
        given: dict[str, Any] = {
            "credential_variables": {
                name: value for name, value in env.items() if name.startswith(CREDENTIAL_PREFIX)
            }
        }
        if data_dir is not None:
            given["credentials_dir"] = data_dir / "source-credentials"
        return cls.read(env, **given)
