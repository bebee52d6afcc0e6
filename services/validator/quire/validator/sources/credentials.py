"""The bearer credential a source system wants, found where its registration
says, at call time: ``env:NAME`` (the validator's environment) or
``file:/path`` (a mounted secret, stripped of surrounding whitespace); an
empty reference means none.

A registration is an operator's word, but what it names is sent to the
system's base URL, so it is confined to what is there to be sent: an
``env:`` name must start with ``QUIRE_SOURCE_CREDENTIAL_`` (never another
setting, an OpenTelemetry header or a cloud key the process happens to
have), and a ``file:`` path must lie, after resolving links, inside the
source-credentials directory (``QUIRE_SOURCE_CREDENTIALS_DIR``; never an
identity key, a TLS key or the KEK ring).

The credential itself never appears in an error, a log line, a metric or a
span; only the reference's kind does. A credential that cannot be found or
cannot be sent ends the job FAILED (``SOURCE_REFUSED``): retrying does not
help until an operator provides it, and the dead letter can then be retried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path

from quire.environment import CREDENTIAL_PREFIX
from quire.errors import SystemFailure
from quire.reasons import ReasonCode

__all__ = ["resolve_credential", "MAX_CREDENTIAL_BYTES", "ENV_PREFIX"]

ENV_PREFIX = CREDENTIAL_PREFIX
"""The only environment variables a credential reference may name."""

MAX_CREDENTIAL_BYTES = 16 * 1024
"""A credential file longer than this is not a bearer token."""


def _refused(what: str) -> SystemFailure:
    return SystemFailure(ReasonCode.SOURCE_REFUSED, f"source system credential {what}")


def _sendable(token: str) -> str:
    """``token`` if it can go in an Authorization header: visible ASCII only."""
    if not token or not all(0x21 <= ord(c) <= 0x7E for c in token):
        raise _refused("is empty or not a token")
    return token


def _read_file(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CREDENTIAL_BYTES + 1)
    except OSError:
        raise _refused("file cannot be read") from None
    if len(data) > MAX_CREDENTIAL_BYTES:
        raise _refused("file is too long")
    try:
        return data.decode("ascii").strip()
    except UnicodeDecodeError:
        raise _refused("is empty or not a token") from None


def _confined(path: Path, directory: Path) -> Path:
    """``path`` with its links resolved, if it lies inside ``directory``."""
    resolved = path.resolve()
    if not resolved.is_relative_to(directory.resolve()):
        raise _refused("file is outside the source-credentials directory")
    return resolved


async def resolve_credential(
    reference: str, *, directory: Path, env: Mapping[str, str]
) -> str | None:
    """The credential ``reference`` names, or None for an empty reference;
    ``directory`` is the only place ``file:`` references may read, ``env``
    the variables ``env:`` references may (``SourceSettings.credential_variables``)."""
    if not reference:
        return None
    kind, _, where = reference.partition(":")
    if kind == "env" and where:
        if not where.startswith(ENV_PREFIX) or where == ENV_PREFIX:
            raise _refused(f"variable is not one of {ENV_PREFIX}*")
        value = env.get(where, "")
        if not value:
            raise _refused("variable is not set")
        return _sendable(value.strip())
    if kind == "file" and where.startswith("/"):
        path = await asyncio.to_thread(_confined, Path(where), directory)
        return _sendable(await asyncio.to_thread(_read_file, path))
    raise _refused("reference is not env:NAME or file:/path")
