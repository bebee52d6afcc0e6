"""Which blob backend a process uses: ``QUIRE_BLOB_BACKEND``.

``local`` (the default) keeps blobs in a directory (``quire.localblobs``);
``nats`` keeps them in a replicated JetStream object store
(``quire.natsblobs``), for clusters with no shared disk. Anything else stops
the process at start (``quire.settings.ServiceSettings``).
"""

from __future__ import annotations

__all__ = ["BLOB_BACKENDS", "LOCAL", "NATS"]

LOCAL = "local"
NATS = "nats"
BLOB_BACKENDS = (LOCAL, NATS)
