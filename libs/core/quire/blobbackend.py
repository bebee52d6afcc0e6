"""Which blob backend a process uses: ``QUIRE_BLOB_BACKEND``.

``local`` (the default) keeps blobs in a directory (``quire.localblobs``);
``nats`` keeps them in a replicated JetStream object store
(``quire.natsblobs``), for clusters with no shared disk. Anything else stops
the process at start.
"""

from __future__ import annotations

from collections.abc import Mapping

from quire.errors import InvalidSetting

__all__ = ["BLOB_BACKENDS", "LOCAL", "NATS", "blob_backend"]

LOCAL = "local"
NATS = "nats"
BLOB_BACKENDS = (LOCAL, NATS)
VARIABLE = "QUIRE_BLOB_BACKEND"


def blob_backend(env: Mapping[str, str]) -> str:
    """The configured backend; ``InvalidSetting`` for a name Quire does not know."""
    value = env.get(VARIABLE, "") or LOCAL
    if value not in BLOB_BACKENDS:
        raise InvalidSetting(VARIABLE, "local or nats")
    return value
