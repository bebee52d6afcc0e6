"""Every setting admission reads, read at once in its ``main``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from quire.admission.jobs.budgets import JobBudgets
from quire.admission.settings import AdmissionSettings, BatchSettings, NotificationSettings
from quire.admission.tenants.directory import configured_operator_token
from quire.egress import EgressPolicy
from quire.environment import Reads
from quire.settings import (
    EVERY_SERVICE_READS,
    ReconcileSettings,
    ServiceSettings,
    TempSpaceSettings,
    WatchSettings,
)

__all__ = ["AdmissionConfig", "SETTINGS"]

SERVICE = "admission"
SETTINGS = (
    *EVERY_SERVICE_READS,
    Reads(AdmissionSettings),
    Reads(TempSpaceSettings),
    Reads(WatchSettings),
    Reads(ReconcileSettings),
    Reads(BatchSettings),
    Reads(NotificationSettings),
    Reads(JobBudgets),
    Reads(EgressPolicy),
)
"""Every settings model admission reads (its ``quire.settings`` entry point)."""


@dataclass(frozen=True)
class AdmissionConfig:
    """Admission's settings, every one read and checked in ``from_env`` before the
    service starts anything."""

    service: ServiceSettings
    admission: AdmissionSettings
    temp_space: TempSpaceSettings
    watch: WatchSettings
    reconcile: ReconcileSettings
    batch: BatchSettings
    notifications: NotificationSettings
    operator_token: str | None
    """The configured first operator token (``QUIRE_OPERATOR_TOKEN_FILE``), checked for its shape."""
    budgets: JobBudgets
    """Jobs' budgets: the default for sources named by reference, the reserve, the longest."""
    egress: EgressPolicy
    """Where callbacks and source systems may point (``QUIRE_EGRESS_ALLOW``)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AdmissionConfig:
        env = os.environ if env is None else env
        admission = AdmissionSettings.from_env(env)
        return cls(
            service=ServiceSettings.from_env(SERVICE, env),
            admission=admission,
            temp_space=TempSpaceSettings.from_env(env, SERVICE),
            watch=WatchSettings.from_env(env),
            reconcile=ReconcileSettings.from_env(env),
            batch=BatchSettings.from_env(env),
            notifications=NotificationSettings.from_env(env),
            operator_token=configured_operator_token(admission.operator_token_file),
            budgets=JobBudgets.from_env(env),
            egress=EgressPolicy.from_env(env),
        )
