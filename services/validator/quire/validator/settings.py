"""The validator's own limits, whatever the ruleset: read once in its
``main`` (``quire.validator.config``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from quire.environment import Settings
from quire.validator.rulesets import DEFAULT_DIRECTORY

__all__ = ["RulesetSettings", "ValidationLimits"]


class ValidationLimits(Settings):
    """What the validator refuses regardless of ruleset."""

    max_pages: int = 2000
    """Pages one document may have."""
    max_decompressed_bytes: int = 256 * 1024 * 1024
    """Bytes one document's streams may decompress to, all together."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ValidationLimits:
        return cls.read(env)


class RulesetSettings(Settings):
    """Where the validator loads its rulesets from at start."""

    rulesets_dir: Path = DEFAULT_DIRECTORY
    """A directory of ruleset files: those that ship with the validator
    (``quire/validator/shipped_rulesets``) unless set."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RulesetSettings:
        return cls.read(env)
