"""Every setting audit reads, read at once in its ``main``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from quire.audit.retrybudget import DEFAULT_MAX_BUDGET_SECONDS
from quire.environment import setting_float
from quire.errors import InvalidSetting
from quire.settings import ReconcileSettings, ServiceSettings, WatchSettings

__all__ = ["AuditConfig", "AuditSettings"]


@dataclass(frozen=True)
class AuditSettings:
    """Audit's own settings: its checkpoints, and how long a step that does not fit
    its job's history yet may wait."""

    checkpoint_seconds: float = 60.0
    """How often every tenant's chain head is signed and published."""
    checkpoint_key_file: Path | None = None
    """Audit's Ed25519 checkpoint key (PEM, PKCS#8), from a mounted Secret, so
    every replica signs with the one key readers trust. Unset, audit makes one
    on first start in its own directory."""
    unexplained_seconds: float = 120.0
    """How long a step that does not fit its job's history yet (its job not
    accepted, its stage's turn not come) waits for the steps before it, before
    it is kept aside as a finding (``quire.audit.succession``)."""
    max_retry_budget_seconds: float = DEFAULT_MAX_BUDGET_SECONDS
    """The longest budget a dead-letter retry may give a job: the longest a
    job may ask for at admission (``QUIRE_MAX_JOB_BUDGET_SECONDS``)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AuditSettings:
        """``QUIRE_AUDIT_CHECKPOINT_SECONDS``, ``QUIRE_AUDIT_CHECKPOINT_KEY_FILE``,
        ``QUIRE_AUDIT_UNEXPLAINED_SECONDS`` and ``QUIRE_MAX_JOB_BUDGET_SECONDS``."""
        env = os.environ if env is None else env
        raw = env.get("QUIRE_AUDIT_CHECKPOINT_SECONDS", "") or "60"
        try:
            seconds = float(raw)
        except ValueError:
            raise InvalidSetting("QUIRE_AUDIT_CHECKPOINT_SECONDS", "a number of seconds") from None
        if not seconds > 0:
            raise InvalidSetting("QUIRE_AUDIT_CHECKPOINT_SECONDS", "more than 0 seconds")
        key = env.get("QUIRE_AUDIT_CHECKPOINT_KEY_FILE", "")
        return cls(
            checkpoint_seconds=seconds,
            checkpoint_key_file=Path(key) if key else None,
            unexplained_seconds=setting_float(
                env, "QUIRE_AUDIT_UNEXPLAINED_SECONDS", 120, minimum=0.1
            ),
            max_retry_budget_seconds=setting_float(
                env, "QUIRE_MAX_JOB_BUDGET_SECONDS", DEFAULT_MAX_BUDGET_SECONDS, minimum=1
            ),
        )


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
            service=ServiceSettings.from_env("audit", env),
            audit=AuditSettings.from_env(env),
            watch=WatchSettings.from_env(env),
            reconcile=ReconcileSettings.from_env(env),
        )
