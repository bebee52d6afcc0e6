"""Who may do what on NATS: one user per service, least privilege, no anonymous.

Each service connects as its own user and may publish only its own events,
its successor's tasks and its dead letters, pull and acknowledge only its own
consumers, read or write the job gate where its step needs it, and announce
itself under its own name in the workers bucket. Replies
come to a per-user inbox prefix, so no service can read another's
deliveries. Stream, consumer and key-value administration (create, purge,
delete, direct writes to streams) belongs to the ``operator`` user, which no
service holds: the embedded stack uses it once to lay out the topology, and a
cluster runs a provisioning job with it.

Blobs and data keys (the cluster layout, ``QUIRE_BLOB_BACKEND=nats``) are
create-only for the services: they may add chunks and first meta messages
(``quire.natsblobs``) and admission alone a tenant's first wrapped key
(``quire.natskeyring``); the streams refuse rollups and second messages.
Removing either — retention, crypto-shredding, a KEK rotation's new wraps,
and the sweep of orphaned chunks — belongs to the ``keeper`` user, which the
operators' data-lifecycle commands (``quire retention``, ``quire keys``) use
and no service holds.

Passwords are generated at first start into the credentials directory (mode
0600, one file per user) and the server's configuration holds only their
bcrypt hashes.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import bcrypt

from quire.announcements import WORKERS_BUCKET
from quire.jobgate import GATE_BUCKET
from quire.natsblobs import BLOB_BUCKET
from quire.natskeyring import FIRST_WRAP, KEYRING_BUCKET
from quire.pipeline import QUEUED_STAGES, STAGES
from quire.rolloutboard import ROLLOUTS_BUCKET
from quire.workqueue.deferral import DEFERRED_PREFIX
from quire.workqueue.topology import (
    DEAD_BOOK_CONSUMER,
    DEAD_CONSUMER,
    DEAD_STREAM,
    EVENTS_CONSUMER,
    EVENTS_STREAM,
    PRIORITIES,
    WORK_STREAM,
    candidate_consumer_name,
    consumer_name,
)

__all__ = [
    "OPERATOR",
    "KEEPER",
    "NatsPermissions",
    "SERVICE_PERMISSIONS",
    "audit_word_subject",
    "inbox_prefix",
    "provision_nats_passwords",
    "authorization_config",
    "bcrypt_rounds",
]

OPERATOR = "operator"
KEEPER = "keeper"
"""The data-lifecycle login: retention, crypto-shredding, KEK rotation."""
BCRYPT_ROUNDS = 10
"""bcrypt's cost for a password someone wrote into the credentials directory."""
GENERATED_ROUNDS = 4
"""bcrypt's least cost, for the passwords Quire generates. A cost slows the
guessing of a password a person chose; these are 256 random bits
(``secrets.token_urlsafe(32)``), beyond guessing at any cost, and
nats-server checks the hash at every connection: at cost 10 that took 60 ms
of its CPU per login, and on a loaded host long enough to stall handshakes
(``quire.runtime``)."""
_GENERATED_LENGTH = 43
"""``secrets.token_urlsafe(32)``'s length: a password this long or longer is
taken as generated."""
_KV_STREAM = f"KV_{GATE_BUCKET}"
_TOPOLOGY_READ = ("$JS.API.STREAM.INFO.*",)


def _gate(service: str) -> tuple[str, ...]:
    """The job gate (``quire.jobgate``): entries under the service's own name
    only, and reads of everyone's from the stream leader (a direct get where
    the bucket has one server). Builds before per-service entries kept one
    entry per job (``<job>``) and read it with a direct get by key; they may
    still, so that they keep working beside this one during a rollout. The
    stream refuses to overwrite or delete any entry, and this build neither
    writes nor reads that layout."""
    return (
        f"$KV.{GATE_BUCKET}.*.{service}.>",
        f"$JS.API.STREAM.MSG.GET.{_KV_STREAM}",
        f"$JS.API.DIRECT.GET.{_KV_STREAM}",
        f"$KV.{GATE_BUCKET}.*",
        f"$JS.API.DIRECT.GET.{_KV_STREAM}.>",
    )


_BLOBS = (
    # The NATS blob backend (QUIRE_BLOB_BACKEND=nats): new object chunks and
    # meta messages, reads from the stream leader, and reading the wrapped
    # data keys. No purge: a service cannot remove an object, nor (the streams
    # refuse it) replace one. The buckets themselves are made by whoever
    # provisions the topology (``ensure_topology``), never by a service.
    f"$O.{BLOB_BUCKET}.C.>",
    f"$O.{BLOB_BUCKET}.M.>",
    f"$JS.API.STREAM.MSG.GET.OBJ_{BLOB_BUCKET}",
    f"$JS.API.STREAM.MSG.GET.KV_{KEYRING_BUCKET}",
)
_DATA_KEY_CREATE = (
    # A tenant's first wrap of a data key (``<tenant>.v<n>.w1``): admission
    # makes it before it takes the tenant's work; no tombstone, no rewrap.
    f"$KV.{KEYRING_BUCKET}.*.*.w{FIRST_WRAP}",
)
_KEEPER = (
    # Retention's and shredding's deletions, KEK rotations' new wraps,
    # tombstones, and the sweep of orphaned chunks: nothing else.
    f"$JS.API.STREAM.MSG.GET.OBJ_{BLOB_BUCKET}",
    f"$JS.API.STREAM.PURGE.OBJ_{BLOB_BUCKET}",
    f"$KV.{KEYRING_BUCKET}.>",
    f"$JS.API.STREAM.MSG.GET.KV_{KEYRING_BUCKET}",
    f"$JS.API.STREAM.PURGE.KV_{KEYRING_BUCKET}",
    *_TOPOLOGY_READ,
)


def _announce(service: str) -> tuple[str, ...]:
    """A service's own announcements (``quire.announcements``): put and delete
    ``<service>.<instance>`` keys, no other service's, and read none (the
    bucket's info, to bind it, is ``_TOPOLOGY_READ``)."""
    return (f"$KV.{WORKERS_BUCKET}.{service}.>",)


_ROLLOUTS_READ = (
    # Each stage's current rollout (``quire.rolloutboard``), which admission writes.
    f"$JS.API.DIRECT.GET.KV_{ROLLOUTS_BUCKET}.>",
    f"$JS.API.STREAM.MSG.GET.KV_{ROLLOUTS_BUCKET}",
)
_ROLLOUTS_WRITE = (
    f"$KV.{ROLLOUTS_BUCKET}.>",
    # A rollout's concurrency cap is its candidate consumer's max_ack_pending;
    # admission may update those consumers and no other.
    *(
        f"$JS.API.CONSUMER.DURABLE.CREATE.{WORK_STREAM}.{candidate_consumer_name(s.name)}"
        for s in QUEUED_STAGES
    ),
)


def inbox_prefix(user: str) -> str:
    """Where ``user``'s replies and pulled messages arrive; nobody else may listen."""
    return f"_INBOX_{user}"


def audit_word_subject(service: str) -> str:
    """Where audit's word on jobs reaching its stage reaches ``service``
    (``quire.auditword``): its own inbox, so only it listens, and only audit
    may publish there."""
    return f"{inbox_prefix(service)}.auditword"


def _consume(stream: str, consumers: Iterable[str]) -> tuple[str, ...]:
    allowed: list[str] = []
    for consumer in consumers:
        allowed.append(f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}")
        allowed.append(f"$JS.ACK.{stream}.{consumer}.>")
    return tuple(allowed)


def _stage(stage: str) -> tuple[str, ...]:
    return _consume(
        WORK_STREAM,
        (*(consumer_name(stage, p) for p in PRIORITIES), candidate_consumer_name(stage)),
    )


def _queue_metrics(stage: str) -> tuple[str, ...]:
    """A stage's own queue readings for its metrics: its consumers' pending
    counts (the candidate track's too), and the oldest waiting message's store
    time (tasks carry ids and digests, never document content)."""
    return (
        *(f"$JS.API.CONSUMER.INFO.{WORK_STREAM}.{consumer_name(stage, p)}" for p in PRIORITIES),
        f"$JS.API.CONSUMER.INFO.{WORK_STREAM}.{candidate_consumer_name(stage)}",
        f"$JS.API.STREAM.MSG.GET.{WORK_STREAM}",
    )


@dataclass(frozen=True)
class NatsPermissions:
    """Subjects a user may publish to; it may subscribe only to its own inbox."""

    publish: tuple[str, ...]


SERVICE_PERMISSIONS: Mapping[str, NatsPermissions] = {
    "admission": NatsPermissions(
        (
            f"quire.work.{STAGES[0].name}.*",
            f"quire.work.{STAGES[0].name}.*.candidate",
            "quire.events.admission",
            *_ROLLOUTS_READ,
            *_ROLLOUTS_WRITE,
            *_announce("admission"),
            # Queue ages: the validate queue for load shedding, every stage's for the
            # reconciler (a job still waiting in line is not re-driven).
            f"$JS.API.CONSUMER.INFO.{WORK_STREAM}.*",
            f"$JS.API.STREAM.MSG.GET.{WORK_STREAM}",
            *_gate("admission"),
            *_BLOBS,
            *_DATA_KEY_CREATE,
            *_TOPOLOGY_READ,
        )
    ),
    **{
        s.service: NatsPermissions(
            (
                *_stage(s.name),
                *_queue_metrics(s.name),
                # Its own deferred tasks' scheduled copies (quire.workqueue.deferral).
                f"{DEFERRED_PREFIX}.{s.name}.>",
                f"quire.work.{s.next}.*",
                f"quire.work.{s.next}.*.candidate",
                f"quire.events.{s.service}",
                f"quire.events.{s.service}.batch",
                *_ROLLOUTS_READ,
                f"quire.dead.{s.name}",
                *_announce(s.service),
                *_gate(s.service),
                *_BLOBS,
                *_TOPOLOGY_READ,
            )
        )
        for s in QUEUED_STAGES
    },
    "audit": NatsPermissions(
        (
            *_stage(STAGES[-1].name),
            *_consume(EVENTS_STREAM, (EVENTS_CONSUMER,)),
            *_consume(DEAD_STREAM, (DEAD_CONSUMER, DEAD_BOOK_CONSUMER)),
            # Operators' dead-letter retries and re-drives start any stage.
            "quire.work.*.*",
            "quire.work.*.*.candidate",
            "quire.events.audit",
            # News for the other audit replicas (quire.audit.replicanews).
            f"{inbox_prefix('audit')}.ledger",
            # Its word to the stages that ask it before acting (quire.auditword).
            *(audit_word_subject(s.service) for s in QUEUED_STAGES[1:]),
            "quire.dead.*",
            *_announce("audit"),
            "quire.checkpoints.audit",
            # The dead-letter office moves an exhausted message out of the work queue.
            f"$JS.API.STREAM.MSG.GET.{WORK_STREAM}",
            f"$JS.API.STREAM.MSG.DELETE.{WORK_STREAM}",
            *_gate("audit"),
            *_BLOBS,
            *_TOPOLOGY_READ,
        )
    ),
    KEEPER: NatsPermissions(_KEEPER),
}


def provision_nats_passwords(directory: Path, users: Iterable[str]) -> dict[str, str]:
    """Each user's password, generated (exclusively, mode 0600) if missing."""
    directory.mkdir(parents=True, exist_ok=True)
    passwords: dict[str, str] = {}
    for user in users:
        path = directory / f"{user}.password"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            passwords[user] = path.read_text().strip()
            continue
        password = secrets.token_urlsafe(32)
        with os.fdopen(fd, "w") as handle:
            handle.write(password + "\n")
        passwords[user] = password
    return passwords


def bcrypt_rounds(password: str) -> int:
    """The cost to hash ``password`` at: the least for one as long as those
    Quire generates, the usual cost for anything shorter."""
    return GENERATED_ROUNDS if len(password) >= _GENERATED_LENGTH else BCRYPT_ROUNDS


def _quoted(subjects: Iterable[str]) -> str:
    return ", ".join(f'"{subject}"' for subject in subjects)


def authorization_config(passwords: Mapping[str, str]) -> str:
    """The server's ``authorization`` block: bcrypt hashes and permissions.

    The operator may do anything; a service user only what
    :data:`SERVICE_PERMISSIONS` lists. There is no ``no_auth_user``, so an
    anonymous connection is refused.
    """
    lines = ["authorization {", "  users = ["]
    for user, password in sorted(passwords.items()):
        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(bcrypt_rounds(password))).decode()
        if user == OPERATOR:
            permissions = '{ publish: ">", subscribe: ">" }'
        else:
            publish = SERVICE_PERMISSIONS[user].publish
            permissions = (
                f"{{ publish: {{ allow: [{_quoted(publish)}] }}, "
                f'subscribe: {{ allow: ["{inbox_prefix(user)}.>"] }} }}'
            )
        lines.append(f'    {{ user: "{user}", password: "{hashed}", permissions: {permissions} }}')
    lines.extend(["  ]", "}"])
    return "\n".join(lines)
