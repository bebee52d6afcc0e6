"""Every setting the signer reads, read at once in its ``main``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from quire.environment import Reads
from quire.signer.keystore import KeySource, SignerSettings, key_source
from quire.signer.witness import WitnessSettings
from quire.stageservice import StageConfig

__all__ = ["SignerConfig", "SETTINGS"]

SERVICE = "signer"
SETTINGS = (*StageConfig.READS, Reads(SignerSettings), Reads(WitnessSettings))
"""Every settings model the signer reads (its ``quire.settings`` entry point)."""


@dataclass(frozen=True)
class SignerConfig:
    """The signer's settings, every one read and checked in ``from_env`` before the
    service starts anything."""

    stage: StageConfig
    keys: KeySource
    """Where signing keys come from (generated, configured files, or a PKCS#11 token)."""
    tsa_url: str | None
    """An RFC 3161 timestamp authority (``QUIRE_SIGNER_TSA_URL``): signatures become PAdES B-T."""
    witness: WitnessSettings
    """The witness of audit's checkpoints this process also runs."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SignerConfig:
        env = os.environ if env is None else env
        stage = StageConfig.from_env(SERVICE, env)
        keys = SignerSettings.from_env(env)
        return cls(
            stage=stage,
            keys=key_source(stage.service.service_dir, keys),
            tsa_url=keys.tsa_url,
            witness=WitnessSettings.from_env(stage.service.service_dir, env),
        )
