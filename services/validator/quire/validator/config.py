"""Every setting the validator reads, read at once in its ``main``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from quire.egress import EgressPolicy
from quire.environment import Reads
from quire.settings import SandboxSettings
from quire.stageservice import StageConfig
from quire.validator.budgets import BudgetRule
from quire.validator.settings import RulesetSettings, ValidationLimits
from quire.validator.sources.settings import SourceSettings

__all__ = ["ValidatorConfig", "SETTINGS"]

SERVICE = "validator"
SETTINGS = (
    *StageConfig.READS,
    Reads(SandboxSettings, {"LANE": "QUARANTINE"}, SandboxSettings.QUARANTINE),
    Reads(BudgetRule),
    Reads(ValidationLimits),
    Reads(RulesetSettings),
    Reads(SourceSettings),
    Reads(EgressPolicy),
)
"""Every settings model the validator reads (its ``quire.settings`` entry point)."""


@dataclass(frozen=True)
class ValidatorConfig:
    """The validator's settings, every one read and checked in ``from_env`` before
    the service starts anything."""

    stage: StageConfig
    quarantine: SandboxSettings
    """The lane for sources that exhausted the shared pool (one worker, low priority)."""
    budgets: BudgetRule
    limits: ValidationLimits
    rulesets_dir: Path
    sources: SourceSettings
    """Fetching sources named by reference: breakers, the budget's reserve."""
    egress: EgressPolicy
    """Which addresses source systems may be called at (``QUIRE_EGRESS_ALLOW``)."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ValidatorConfig:
        env = os.environ if env is None else env
        stage = StageConfig.from_env(SERVICE, env)
        return cls(
            stage=stage,
            quarantine=SandboxSettings.from_env(env, SERVICE, lane="quarantine"),
            budgets=BudgetRule.from_env(env),
            limits=ValidationLimits.from_env(env),
            rulesets_dir=RulesetSettings.from_env(env).rulesets_dir,
            sources=SourceSettings.from_env(env, stage.service.data_dir),
            egress=EgressPolicy.from_env(env),
        )
