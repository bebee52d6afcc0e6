"""Every setting audit reads, read at once in its ``main``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from quire.audit.retrybudget import DEFAULT_MAX_BUDGET_SECONDS
from quire.environment import Reads, Settings, Variable
from quire.settings import EVERY_SERVICE_READS, ReconcileSettings, ServiceSettings, WatchSettings

__all__ = ["AuditConfig", "AuditSettings", "SETTINGS"]

SERVICE = "audit"


class AuditSettings(Settings):
    """Audit's own settings: its checkpoints, and how long a step that does not fit
    its job's history yet may wait."""

    model_config = SettingsConfigDict(env_prefix="QUIRE_AUDIT_")

    checkpoint_seconds: float = Field(default=60.0, gt=0)
    """How often every tenant's chain head is signed and published."""
    checkpoint_key_file: Path | None = None
    """Audit's Ed25519 checkpoint key (PEM, PKCS#8), from a mounted Secret, so
    every replica signs with the one key readers trust. Unset, audit makes one
    on first start in its own directory."""
    unexplained_seconds: float = Field(default=120.0, ge=0.1)
    """How long a step that does not fit its job's history yet (its job not
    accepted, its stage's turn not come) waits for the steps before it, before
    it is kept aside as a finding (``quire.audit.succession``)."""
    max_retry_budget_seconds: Annotated[float, Variable("QUIRE_MAX_JOB_BUDGET_SECONDS")] = Field(
        default=DEFAULT_MAX_BUDGET_SECONDS, ge=1
    )
    """The longest budget a dead-letter retry may give a job: the longest a
    job may ask for at admission."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AuditSettings:
        return cls.read(env)


@dataclass(frozen=True)
class AuditConfig:
    """Audit's settings, every one read and checked in ``from_env`` before the
    service starts anything."""

    service: ServiceSettings
    audit: AuditSettings
    watch: WatchSettings
    reconcile: ReconcileSettings

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AuditConfig:
        env = os.environ if env is None else env
        return cls(
            service=ServiceSettings.from_env(SERVICE, env),
            audit=AuditSettings.from_env(env),
            watch=WatchSettings.from_env(env),
            reconcile=ReconcileSettings.from_env(env),
        )


SETTINGS = (
    *EVERY_SERVICE_READS,
    Reads(AuditSettings),
    Reads(WatchSettings),
    Reads(ReconcileSettings),
)
"""Every settings model audit reads (its ``quire.settings`` entry point)."""
