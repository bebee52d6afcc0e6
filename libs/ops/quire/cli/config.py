"""Where the CLI finds the stack: the environment first, then ``stack.json``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from quire.cli.errors import CliError
from quire.cli.exitcodes import ExitCode
from quire.environment import Reads
from quire.settings import RetentionSettings
from quire.stack.info import StackInfo
from quire.tls import TlsSettings

__all__ = ["ClientConfig", "SETTINGS"]

SETTINGS = (Reads(RetentionSettings), Reads(TlsSettings))
"""The settings models the CLI reads (its ``quire.settings`` entry point): the
default retention periods (``quire retention``) and mutual TLS; its own
variables (``QUIRE_TOKEN``...) are ``quire.environment.NOT_SETTINGS``."""


@dataclass(frozen=True)
class ClientConfig:
    admission: str
    signer: str
    validator: str
    audit: str
    token: str
    operator_token: str
    tls: TlsSettings | None = None

    @classmethod
    def load(cls, data_dir: Path) -> ClientConfig:
        info = StackInfo.read(data_dir) if (data_dir / "stack.json").exists() else None
        admission = os.environ.get("QUIRE_ADMISSION_ADDR") or (
            info.endpoints["admission"] if info else ""
        )
        signer = os.environ.get("QUIRE_SIGNER_ADDR") or (info.endpoints["signer"] if info else "")
        audit = os.environ.get("QUIRE_AUDIT_ADDR") or (info.endpoints["audit"] if info else "")
        validator = os.environ.get("QUIRE_VALIDATOR_ADDR") or (
            info.endpoints["validator"] if info else ""
        )
        token = os.environ.get("QUIRE_TOKEN") or (info.token() if info else "")
        operator = os.environ.get("QUIRE_OPERATOR_TOKEN") or (info.operator_token() if info else "")
        if not admission or not (token or operator):
            raise CliError(
                f"no running stack found in {data_dir}: start one with `quire up` "
                "or set QUIRE_ADMISSION_ADDR and QUIRE_TOKEN (or QUIRE_OPERATOR_TOKEN)",
                ExitCode.UNREACHABLE,
            )
        return cls(
            admission=admission,
            signer=signer,
            validator=validator,
            audit=audit,
            token=token,
            operator_token=operator,
            tls=TlsSettings.from_env(),
        )
