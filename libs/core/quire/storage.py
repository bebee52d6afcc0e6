"""The blob store a process opens: the configured backend
(``QUIRE_BLOB_BACKEND``), its data keys unwrapped by the configured KEKs.

Opening the NATS backend connects (its own connection, ``quire.natsport``)
and makes the blob and key-ring buckets if they are missing, so callers on an
event loop open it with ``asyncio.to_thread``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from quire.blobbackend import NATS
from quire.blobstore import DEFAULT_OWNER, BlobStore
from quire.datakeys import DataKeys
from quire.kek import DEVELOPMENT_RING, KekRing, KekSettings, load_kek_ring
from quire.localblobs import LocalBlobStore
from quire.natsauth import KEEPER
from quire.settings import ServiceSettings

__all__ = ["keeper_env", "open_blob_store", "service_settings", "tool_kek_settings"]

TMP_DIR = ".tmp"
"""The temporary space under the blob root, on this host's disk whatever the backend."""


def service_settings(data_dir: Path, service: str, env: Mapping[str, str]) -> ServiceSettings:
    """``service``'s settings as it would read them from ``env``, for
    ``data_dir`` (an operator tool's view of a stack's data directory)."""
    return ServiceSettings.from_env(service, {**env, "QUIRE_DATA_DIR": str(data_dir)})


def keeper_env(data_dir: Path, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a data-lifecycle command (``quire retention``, ``quire
    keys``): the ``keeper`` NATS login, the only one that may delete blobs or
    data keys in the cluster layout — unless ``QUIRE_NATS_USER`` names a
    login, or there is no keeper's password (in ``QUIRE_NATS_CREDENTIALS_DIR``
    or the embedded stack's credentials directory) to use."""
    if env.get("QUIRE_NATS_USER"):
        return dict(env)
    directory = env.get("QUIRE_NATS_CREDENTIALS_DIR") or str(data_dir / "credentials" / "nats")
    password = Path(directory) / f"{KEEPER}.password"
    if not password.is_file():
        return dict(env)
    return {**env, "QUIRE_NATS_USER": KEEPER, "QUIRE_NATS_PASSWORD_FILE": str(password)}


def tool_kek_settings(data_dir: Path, env: Mapping[str, str]) -> KekSettings:
    """The KEKs an operator tool (``quire check``, ``quire keys``) uses: those
    configured in ``env``, else the embedded stack's development ring."""
    settings = KekSettings.from_env(env)
    if settings.ring_file is None and not settings.pkcs11_module:
        ring = data_dir / DEVELOPMENT_RING
        if ring.exists():
            return KekSettings(ring_file=ring, development=True)
    return settings


def open_blob_store(
    settings: ServiceSettings, *, kek: KekSettings | None = None, owner: str = DEFAULT_OWNER
) -> BlobStore:
    """The backend ``settings`` names, under the KEKs of ``kek`` (default:
    the service's own); KekConfigError without a usable KEK."""
    keks = load_kek_ring(settings.kek if kek is None else kek, settings.data_dir)
    store: BlobStore
    if settings.blob_backend == NATS:
        store = _open_nats(settings, keks, owner)
    else:
        root = settings.blob_root
        store = LocalBlobStore(root, DataKeys(root, keks), owner=owner)
    if settings.faults_dir is not None:  # the fault tests' storage faults, never production's
        from quire.faultyblobs import FaultInjectingBlobStore

        return FaultInjectingBlobStore(store, settings.faults_dir)
    return store


def _open_nats(settings: ServiceSettings, keks: KekRing, owner: str) -> BlobStore:
    # Imported here: the local default needs no NATS client machinery.
    from quire.natsblobs import NatsBlobStore, ensure_blob_buckets
    from quire.natsport import NatsPort
    from quire.runtime import connect_nats

    password = ""
    if settings.nats_password_file is not None:
        password = settings.nats_password_file.read_text().strip()
    port = NatsPort(
        lambda: connect_nats(
            settings.nats_url,
            f"quire-{settings.service}-blobs",
            user=settings.nats_user,
            password=password,
        ),
        name=f"{settings.service}-blobs",
    )
    try:
        port.run(lambda: ensure_blob_buckets(port.js, settings.queue.replicas, provisioning=False))
        return NatsBlobStore.open(port, keks, settings.blob_root / TMP_DIR, owner=owner)
    except BaseException:
        port.close()
        raise
