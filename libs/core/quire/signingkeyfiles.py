"""Ed25519 private keys kept in PEM files: audit's checkpoint key, the
witness's key. Generated on first start when no file is configured (mode
0600; of racing replicas, one key wins and all use it), otherwise read from
the configured file, a mounted Secret."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from quire.errors import InvalidSetting
from quire.privatefiles import write_private

__all__ = ["ed25519_key"]


def ed25519_key(path: Path, *, variable: str, generate: bool) -> Ed25519PrivateKey:
    """The key at ``path``; made first when ``generate`` and there is none.
    ``InvalidSetting`` naming ``variable`` when the file is unusable."""
    if generate and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        write_private(path, pem, exclusive=True)
    try:
        data = path.read_bytes()
    except OSError:
        raise InvalidSetting(variable, "a readable file") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise InvalidSetting(variable, "an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InvalidSetting(variable, "an Ed25519 key")
    return key
