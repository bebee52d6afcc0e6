"""Key-encryption keys: what wraps the tenants' data keys.

A KEK comes from configuration, never from the data directory in
production:

- ``QUIRE_KEK_FILE``: a key ring file (a mounted Secret), one KEK a line,
  ``<id> <base64 of 32 random bytes>``; ``#`` starts a comment. The first
  line wraps new data keys; the others still unwrap (rotation).
- ``QUIRE_KEK_PKCS11_MODULE`` with ``QUIRE_KEK_PKCS11_TOKEN``,
  ``QUIRE_KEK_PKCS11_LABELS`` (comma separated, the first wraps) and
  ``QUIRE_KEK_PKCS11_PIN_FILE``: AES keys that never leave a PKCS#11 token;
  wrapping is AES-GCM inside the token. With both set, the token wraps and
  the file's keys only unwrap (a move from file keys to a token).

The embedded stack generates a development ring into its data directory and
says so with ``QUIRE_KEK_DEVELOPMENT=1``; without that, a ring file inside
the data directory is refused at start.

Wrapped key = 12-byte nonce | AES-256-GCM(KEK, data key, associated data),
where the associated data names the tenant and the data key's version, so a
wrapped key cannot be moved to another tenant or version.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import BeforeValidator
from pydantic_settings import SettingsConfigDict

from quire.environment import Settings, Variable
from quire.errors import TransientError
from quire.privatefiles import write_private
from quire.reasons import ReasonCode

__all__ = [
    "KekSettings",
    "KekRing",
    "KeyEncryptionKey",
    "SoftwareKek",
    "Pkcs11Kek",
    "KekConfigError",
    "load_kek_ring",
    "provision_development_ring",
    "PKCS11_PREFIX",
    "DEVELOPMENT_RING",
]

KEK_BYTES = 32
NONCE_BYTES = 12
PKCS11_PREFIX = "pkcs11:"
DEVELOPMENT_RING = Path("keys") / "kek-ring"
"""Where the embedded stack keeps its development ring, under its data directory."""


class KekConfigError(ValueError):
    """The KEK configuration cannot be used; the process must not start."""


def _unwrap_failed() -> TransientError:
    # Transient: an operator fixes it by configuring the KEK, and the job waits.
    return TransientError(ReasonCode.DATA_KEY_UNAVAILABLE, "data key does not unwrap")


class KeyEncryptionKey(Protocol):
    kek_id: str

    def wrap(self, key: bytes, aad: bytes) -> bytes: ...
    def unwrap(self, wrapped: bytes, aad: bytes) -> bytes: ...


class SoftwareKek:
    """A KEK held in memory, read from the ring file."""

    def __init__(self, kek_id: str, key: bytes) -> None:
        if len(key) != KEK_BYTES:
            raise KekConfigError(f"KEK {kek_id} is not {KEK_BYTES} bytes")
        self.kek_id = kek_id
        self._aead = AESGCM(key)

    def wrap(self, key: bytes, aad: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, key, aad)

    def unwrap(self, wrapped: bytes, aad: bytes) -> bytes:
        try:
            return self._aead.decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], aad)
        except InvalidTag:
            raise _unwrap_failed() from None


class Pkcs11Kek:
    """An AES key inside a PKCS#11 token; the key never leaves it.

    A session is opened per call: wrapping happens once per tenant and
    process (data keys are cached unwrapped), so this is not a hot path.
    """

    def __init__(self, module: str, token_label: str, key_label: str, pin: str) -> None:
        self.kek_id = f"{PKCS11_PREFIX}{token_label}/{key_label}"
        self._module = module
        self._token_label = token_label
        self._key_label = key_label
        self._pin = pin

    def _run(self, operation: str, data: bytes, nonce: bytes, aad: bytes) -> bytes:
        import pkcs11
        from pkcs11 import KeyType, Mechanism, ObjectClass
        from pkcs11.mechanisms import GCMParams

        token = pkcs11.lib(self._module).get_token(token_label=self._token_label)
        with token.open(user_pin=self._pin) as session:
            key: Any = session.get_key(
                label=self._key_label, key_type=KeyType.AES, object_class=ObjectClass.SECRET_KEY
            )
            params = GCMParams(nonce, aad, 128)
            method = key.encrypt if operation == "encrypt" else key.decrypt
            return bytes(method(data, mechanism=Mechanism.AES_GCM, mechanism_param=params))

    def wrap(self, key: bytes, aad: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._run("encrypt", key, nonce, aad)

    def unwrap(self, wrapped: bytes, aad: bytes) -> bytes:
        from pkcs11.exceptions import PKCS11Error

        try:
            return self._run("decrypt", wrapped[NONCE_BYTES:], wrapped[:NONCE_BYTES], aad)
        except PKCS11Error:  # no such key in the token, or it does not fit
            raise _unwrap_failed() from None


class KekRing:
    """The KEK that wraps new data keys, and every KEK that may unwrap."""

    def __init__(self, current: KeyEncryptionKey, others: list[KeyEncryptionKey]) -> None:
        self.current = current
        self._by_id = {k.kek_id: k for k in [*others, current]}

    def get(self, kek_id: str) -> KeyEncryptionKey:
        kek = self._by_id.get(kek_id)
        if kek is None:
            raise _unwrap_failed()
        return kek

    @property
    def ids(self) -> list[str]:
        return list(self._by_id)


def _listed(value: object) -> object:
    """A comma-separated variable as a tuple."""
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


class KekSettings(Settings):
    """Where the key-encryption keys that wrap tenants' data keys come from."""

    model_config = SettingsConfigDict(env_prefix="QUIRE_KEK_")

    ring_file: Annotated[Path | None, Variable("QUIRE_KEK_FILE")] = None
    """The KEK ring: ``<id> <base64 key>`` a line, the first wraps; outside the
    data directory except in the embedded stack (``quire up`` makes
    ``<data dir>/keys/kek-ring``)."""
    pkcs11_module: str = ""
    """KEKs inside a PKCS#11 token instead: the module's path."""
    pkcs11_token: str = ""
    """The token's label."""
    pkcs11_labels: Annotated[tuple[str, ...], BeforeValidator(_listed)] = ()
    """The KEKs' labels in the token, comma-separated; the first wraps."""
    pkcs11_pin_file: Path | None = None
    """A file (a mounted Secret) holding the token's PIN."""
    development: bool = False
    """Set only by the embedded stack: its ring may live in the data directory."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KekSettings:
        return cls.read(env)


def _read_ring(path: Path) -> list[SoftwareKek]:
    keks: list[SoftwareKek] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        parts = text.split()
        if len(parts) != 2 or parts[0].startswith(PKCS11_PREFIX):
            raise KekConfigError(f"KEK ring line {number} is not '<id> <base64 key>'")
        try:
            key = base64.b64decode(parts[1], validate=True)
        except binascii.Error:
            raise KekConfigError(f"KEK ring line {number}: key is not base64") from None
        keks.append(SoftwareKek(parts[0], key))
    return keks


def load_kek_ring(settings: KekSettings, data_dir: Path) -> KekRing:
    """The configured ring; KekConfigError when nothing usable is configured."""
    file_keks: list[SoftwareKek] = []
    if settings.ring_file is not None:
        ring = settings.ring_file.resolve()
        if ring.is_relative_to(data_dir.resolve()) and not settings.development:
            raise KekConfigError(
                "the KEK ring is inside the data directory; configure it from a Secret "
                "(QUIRE_KEK_FILE elsewhere) or a PKCS#11 token"
            )
        file_keks = _read_ring(ring)
    token_keks: list[KeyEncryptionKey] = []
    if settings.pkcs11_module:
        if not settings.pkcs11_labels or settings.pkcs11_pin_file is None:
            raise KekConfigError("QUIRE_KEK_PKCS11_LABELS and QUIRE_KEK_PKCS11_PIN_FILE are needed")
        pin = settings.pkcs11_pin_file.read_text().strip()
        token_keks = [
            Pkcs11Kek(settings.pkcs11_module, settings.pkcs11_token, label, pin)
            for label in settings.pkcs11_labels
        ]
    everything: list[KeyEncryptionKey] = [*token_keks, *file_keks]
    if not everything:
        raise KekConfigError("no key-encryption key: set QUIRE_KEK_FILE or QUIRE_KEK_PKCS11_*")
    return KekRing(everything[0], everything[1:])


def new_ring_line(kek_id: str | None = None) -> str:
    """One ring line with a fresh random KEK."""
    name = kek_id or datetime.now(UTC).strftime("kek-%Y%m%dT%H%M%S")
    return f"{name} {base64.b64encode(os.urandom(KEK_BYTES)).decode()}\n"


def provision_development_ring(path: Path) -> Path:
    """The embedded stack's ring: generated once (mode 0600), then kept."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    ring = (
        "# Development KEK ring of the embedded stack; production configures its own.\n"
        + new_ring_line("dev-1")
    )
    write_private(path, ring.encode(), exclusive=True)  # of racing stacks, one ring wins
    return path
