"""The design's skeleton: Quire's five processes doing only what the design
requires of every job, with none of Quire's code, so a run can say how much
of the CPU per job any implementation in this runtime would spend anyway.

``bench/floor.py`` prices each part alone, in a tight loop of one process.
The skeleton puts the same parts where the design puts them: five processes
on asyncio (uvloop) and nats-py, joined by JetStream work queues on a
nats-server configured as the stack's (file store, ``sync_interval: always``),
and a gRPC door. Per job:

- the client makes two calls: submit (the packet's sources inline) and watch;
- admission checks each source's sha256; acceptances arriving together are
  kept together: their sources as blobs (AES-256-GCM, written to a
  temporary name, fsync'd, renamed, the directory fsync'd once) and their
  jobs in one transaction, then their validate tasks and, in one message,
  their events;
- the validator, the assembler and the signer each pull their tasks as a
  group (one long poll, then the waiting ones; the next pull once the group
  is done, so the next gathers on the queue meanwhile), check each one's
  Ed25519 signature, take the group's leases in one transaction (a token per
  job, incremented on every delivery: DESIGN.md invariant 4), read and
  decrypt their inputs and check their digests, send the group's documents
  to their sandbox worker (a process under limits, invariant 9) and take
  them back over its pipe (the signer first claims each job in a key-value
  gate, a key created only if absent: one signature per job, invariant 5),
  keep their outputs as blobs
  (the assembler the sources joined, the signer the same bytes again: the
  PDF work itself is the bare libraries', priced apart) and commit the
  outcomes as a compare-and-swap on each token in one more transaction (one
  thread hop for both), publish the next tasks and the group's events in
  one message (the signer's events ride with its task to audit), and
  acknowledge;
- audit pulls events and commit tasks as groups, appends them to a
  hash-chained ledger in one transaction per group, completes a job only
  when its history is whole, and tells admission (one core NATS message).

Every message is signed by its producer and verified by its consumer and
carries a ``Nats-Msg-Id``; every statement is built once. That is at most
seven JetStream messages, one core message, two calls, eight write
transactions and five blobs per job, fewer as groups form.

What Quire does beyond this is left out: protobuf, the gate's reads, trace
context and spans, metrics, logging, heartbeats, tenants' logins and caller
proofs, quotas, rulesets, temporary files, retries and dead letters,
announcements.
So the skeleton's CPU per job is less than any Quire could spend, not a bound
every conceivable design must pay: it is the price of this design's parts,
placed as the design places them, in the runtime Quire is written for.

Run as a script, it is one of the five (``python skeleton.py ROLE CONFIG``);
``skeleton_floor`` starts them all and drives packets through.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from floor import keep_file, sync_folder
from procstats import own_cpu_seconds, process_cpu_seconds

ROLES = ("admission", "validator", "assembler", "signer", "audit")
STAGES = {"validator": "validate", "assembler": "assemble", "signer": "sign"}
"""Each pulling stage and the work subject it consumes."""
NEXT = {"admission": "validate", "validator": "assemble", "assembler": "sign", "signer": "commit"}
PRODUCER = {v: k for k, v in NEXT.items()}
"""The one service whose signature makes each work subject's task genuine."""
EVENT = {"admission": "ACCEPTED", "validator": "VALIDATED", "assembler": "ASSEMBLED"}
HISTORY = tuple(EVENT.values())
"""The events audit must hold before the signer's commit completes a job."""
WORK, EVENTS = "SKELWORK", "SKELEVENTS"
DONE = "skel.done"
LONG_POLL_SECONDS = 5.0
GROUP_PULL_SECONDS = 0.1
READY_SECONDS = 30.0
SANDBOX_MEMORY = 1 << 30
GATES = "SKELGATES"
DRIVE_SECONDS = 60.0
DRIVE_SECONDS_PER_JOB = 1.0
SIGNATURE = "Skel-Signed"

__all__ = ["Skeleton", "skeleton_floor", "ROLES"]


@dataclass(frozen=True)
class Skeleton:
    """What a run of the skeleton measured: its cheapest pass, what the passes
    left behind, and the idle jobs' latencies."""

    jobs: int
    seconds: float
    cpu_seconds: dict[str, float]
    """By process kind: the five roles, ``nats-server`` and ``client``."""
    ledger_entries: int
    """Entries audit appended for the measured passes' jobs (five each when whole)."""
    left_in_streams: int
    """Messages still on the work and events streams after the run (none when
    every one was acknowledged)."""
    idle_seconds: tuple[float, ...] = ()
    """Submit to completed, for jobs sent one after another on the idle skeleton."""
    claims: int = 0
    """Jobs the signer claimed in the gate (every job it signed, once each)."""
    pass_ms: tuple[float, ...] = ()
    """CPU ms per job of every measured pass; the figures above are the least's."""

    def ms_per_job(self, kind: str) -> float:
        return self.cpu_seconds.get(kind, 0.0) / self.jobs * 1000

    @property
    def total_ms(self) -> float:
        return sum(self.cpu_seconds.values()) / self.jobs * 1000

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


# --- what every role shares -------------------------------------------------


class Wire:
    """Ed25519 signatures over subject and payload, with the producer named."""

    def __init__(self, role: str, seeds: dict[str, str]) -> None:
        from nacl.signing import SigningKey

        self._role = role
        self._key = SigningKey(base64.b64decode(seeds[role]))
        self._trust = {
            name: SigningKey(base64.b64decode(seed)).verify_key for name, seed in seeds.items()
        }

    def headers(self, subject: str, payload: bytes, message_id: str) -> dict[str, str]:
        signed = self._key.sign(subject.encode() + b"\0" + payload).signature
        return {
            "Nats-Msg-Id": message_id,
            SIGNATURE: f"{self._role}.{base64.b64encode(signed).decode()}",
        }

    def check(
        self, subject: str, payload: bytes, headers: dict[str, str] | None, allowed: str
    ) -> bool:
        from nacl.exceptions import BadSignatureError

        producer, _, encoded = (headers or {}).get(SIGNATURE, "").partition(".")
        if producer != allowed:
            return False
        try:
            self._trust[producer].verify(
                subject.encode() + b"\0" + payload, base64.b64decode(encoded)
            )
        except (BadSignatureError, ValueError, KeyError):
            return False
        return True


class Blobs:
    """Blobs sealed with AES-256-GCM, kept durably under one role's folder."""

    def __init__(self, root: Path, role: str, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._root = root
        self._own = root / role
        self._own.mkdir(parents=True, exist_ok=True)
        self._cipher = AESGCM(key)

    def keep(self, named: list[tuple[str, bytes]]) -> None:
        """Each blob written to a temporary name, fsync'd, renamed; the folder once."""
        for name, data in named:
            nonce = os.urandom(12)
            keep_file(self._own, name, nonce + self._cipher.encrypt(nonce, data, name.encode()))
        sync_folder(self._own)

    def read(self, key: str, digest: str) -> bytes:
        """The blob at ``key`` (``role/name``), opened; its digest must match."""
        with open(self._root / key, "rb") as handle:
            sealed = handle.read()
        data = self._cipher.decrypt(sealed[:12], sealed[12:], key.split("/", 1)[1].encode())
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError("a blob does not match its digest")
        return data


def _task(job: str, keys: list[str], digests: list[str]) -> bytes:
    return f"{job}|{','.join(keys)}|{','.join(digests)}".encode()


def _read_task(payload: bytes) -> tuple[str, list[str], list[str]]:
    job, keys, digests = payload.decode().split("|")
    return job, keys.split(","), digests.split(",")


def _database(path: Path, table: Any) -> Any:
    """``quire.database`` on SQLite as every service configures it, holding ``table``."""
    from quire.database import Database

    database = Database(f"sqlite:///{path}", table.metadata)
    database.create_schema()
    return database


def _waiting(message: Any) -> int:
    try:
        return int(message.metadata.num_pending or 0)
    except Exception:  # noqa: BLE001 - not a JetStream delivery
        return 0


async def _pull(
    subscription: Any, slots: int, group: Callable[[list[Any]], Awaitable[None]]
) -> None:
    """One group at a time: a long poll for a message, then the ones waiting
    behind it (``slots`` in all at most), handled as one before the next pull,
    so that the next group gathers on the queue meanwhile."""
    from nats.errors import TimeoutError as NatsTimeoutError

    while True:
        try:
            messages = await subscription.fetch(1, timeout=LONG_POLL_SECONDS)
        except (NatsTimeoutError, TimeoutError):
            continue
        waiting = min(_waiting(messages[-1]), slots - 1)
        if waiting > 0:
            try:
                messages += await subscription.fetch(waiting, timeout=GROUP_PULL_SECONDS)
            except (NatsTimeoutError, TimeoutError):
                pass
        await group(messages)


class Sandbox:
    """One sandbox worker process under limits (DESIGN.md invariant 9): a
    group's documents go to it over its pipe and come back (the PDF work it
    would do is the bare libraries', priced apart)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process
        self.pid = process.pid

    @classmethod
    async def start(cls) -> Sandbox:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            "sandbox",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return cls(process)

    async def exchange(self, documents: list[bytes]) -> list[bytes]:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(_frame(documents))
        await self._process.stdin.drain()
        return _items(await _read_frame(self._process.stdout))


def _body(items: list[bytes]) -> bytes:
    """Byte strings, each after its length: a packet, or a frame's body."""
    return b"".join(len(item).to_bytes(4, "big") + item for item in items)


def _frame(items: list[bytes]) -> bytes:
    body = _body(items)
    return len(body).to_bytes(4, "big") + body


def _items(body: bytes) -> list[bytes]:
    items, at = [], 0
    while at < len(body):
        size = int.from_bytes(body[at : at + 4], "big")
        items.append(body[at + 4 : at + 4 + size])
        at += 4 + size
    return items


async def _read_frame(stream: asyncio.StreamReader) -> bytes:
    size = int.from_bytes(await stream.readexactly(4), "big")
    return await stream.readexactly(size)


def _sandbox() -> None:
    """The worker: limits set once, then each frame of documents sent back."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (SANDBOX_MEMORY, SANDBOX_MEMORY))
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = source.read(4)
        if len(head) < 4:
            return
        body = source.read(int.from_bytes(head, "big"))
        sink.write(_frame(_items(body)))
        sink.flush()


# --- the roles ----------------------------------------------------------------


class Role:
    def __init__(self, role: str, config: dict[str, Any]) -> None:
        self.role = role
        self.config = config
        self.folder = Path(config["folder"])
        self.wire = Wire(role, config["seeds"])
        self.blobs = Blobs(self.folder / "blobs", role, base64.b64decode(config["key"]))
        self.nc: Any = None
        self.js: Any = None

    async def connect(self) -> None:
        import nats

        self.nc = await nats.connect(self.config["nats"])
        self.js = self.nc.jetstream()

    async def publish_next(self, job: str, keys: list[str], digests: list[str]) -> None:
        subject = f"skel.work.{NEXT[self.role]}"
        payload = _task(job, keys, digests)
        headers = self.wire.headers(subject, payload, f"{job}.{NEXT[self.role]}")
        await self.js.publish(subject, payload, headers=headers)

    async def publish_events(self, jobs: list[str]) -> None:
        """The events of one commit, in one message (DESIGN.md invariant 3)."""
        subject = f"skel.events.{self.role}"
        payload = ";".join(f"{job}|{EVENT[self.role]}" for job in jobs).encode()
        batch = hashlib.sha256(payload).hexdigest()
        await self.js.publish(subject, payload, headers=self.wire.headers(subject, payload, batch))


@dataclass
class _Acceptance:
    """A submitted job waiting for the commit that keeps it."""

    job: str
    named: list[tuple[str, bytes]]
    keys: list[str]
    digests: list[str]
    kept: asyncio.Future[None]


class Admission(Role):
    async def serve(self) -> None:
        import grpc
        from sqlalchemy import Column, MetaData, String, Table

        self.jobs = Table(
            "jobs", MetaData(), Column("job", String, primary_key=True), Column("sources", String)
        )
        self.database = _database(self.folder / "admission.db", self.jobs)
        self.watchers: dict[str, asyncio.Future[None]] = {}
        self.finished: set[str] = set()
        self.accepted: list[_Acceptance] = []
        self.arrived = asyncio.Event()
        await self.connect()
        await self.nc.subscribe(DONE, cb=self._done)
        committer = asyncio.create_task(self._commit_accepted())
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    "skel.Admission",
                    {
                        "Submit": grpc.unary_unary_rpc_method_handler(self.submit),
                        "Watch": grpc.unary_stream_rpc_method_handler(self.watch),
                    },
                ),
            )
        )
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(f"ready {port}", flush=True)
        await server.wait_for_termination()
        committer.cancel()

    async def submit(self, request: bytes, context: Any) -> bytes:
        import grpc

        job, sources = _read_packet(request)
        named, keys, digests = [], [], []
        for index, (digest, data) in enumerate(sources):
            if hashlib.sha256(data).hexdigest() != digest:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "DIGEST_MISMATCH")
            named.append((f"{job}-{index}", data))
            keys.append(f"admission/{job}-{index}")
            digests.append(digest)
        accepted = _Acceptance(
            job, named, keys, digests, asyncio.get_running_loop().create_future()
        )
        self.accepted.append(accepted)
        self.arrived.set()
        await accepted.kept
        return job.encode()

    def _keep(
        self, connection: Any, *, named: list[tuple[str, bytes]], rows: list[dict[str, str]]
    ) -> None:
        """One thread hop: the sources kept, then the jobs committed."""
        self.blobs.keep(named)
        connection.execute(self.jobs.insert(), rows)

    async def _commit_accepted(self) -> None:
        """Acceptances arriving together kept and committed together: their
        sources (the folder fsync'd once) and their rows in one thread hop and
        one transaction, then their tasks and, in one message, their events."""
        while True:
            await self.arrived.wait()
            self.arrived.clear()
            group, self.accepted = self.accepted, []
            if not group:
                continue
            named = [blob for each in group for blob in each.named]
            rows = [{"job": each.job, "sources": ",".join(each.digests)} for each in group]

            try:
                await self.database.run(functools.partial(self._keep, named=named, rows=rows))
                await asyncio.gather(
                    *(self.publish_next(each.job, each.keys, each.digests) for each in group),
                    self.publish_events([each.job for each in group]),
                )
            except Exception as error:  # noqa: BLE001 - each caller hears of it
                for each in group:
                    each.kept.set_exception(error)
                continue
            for each in group:
                each.kept.set_result(None)

    async def watch(self, request: bytes, context: Any) -> Any:
        job = request.decode()
        if job not in self.finished:
            waiter = self.watchers[job] = asyncio.get_running_loop().create_future()
            await waiter
        self.finished.discard(job)
        yield b"COMPLETED"

    async def _done(self, message: Any) -> None:
        if not self.wire.check(message.subject, message.data, message.headers, "audit"):
            return
        job = message.data.decode()
        waiter = self.watchers.pop(job, None)
        if waiter is None:
            self.finished.add(job)
        elif not waiter.done():
            waiter.set_result(None)


def _packet(job: str, paths: list[Path]) -> bytes:
    parts = [job.encode()]
    for path in paths:
        data = path.read_bytes()
        parts += [hashlib.sha256(data).hexdigest().encode(), data]
    return _body(parts)


def _read_packet(request: bytes) -> tuple[str, list[tuple[str, bytes]]]:
    parts = _items(request)
    job = parts[0].decode()
    return job, [(parts[i].decode(), parts[i + 1]) for i in range(1, len(parts), 2)]


class StageRole(Role):
    """The validator, the assembler and the signer."""

    async def serve(self) -> None:
        from sqlalchemy import Column, Integer, MetaData, String, Table

        self.leases = Table(
            "leases",
            MetaData(),
            Column("job", String, primary_key=True),
            Column("token", Integer, nullable=False),
            Column("outcome", String),
        )
        self.database = _database(self.folder / f"{self.role}.db", self.leases)
        self._prepare()
        await self.connect()
        self.sandbox = await Sandbox.start()
        if self.role == "signer":
            self.gates = await self.js.key_value(GATES)
        subject = f"skel.work.{STAGES[self.role]}"
        subscription = await self.js.pull_subscribe_bind(durable=STAGES[self.role], stream=WORK)
        print(f"ready worker {self.sandbox.pid}", flush=True)
        await _pull(subscription, self.config["slots"], lambda group: self.group(subject, group))

    def _prepare(self) -> None:
        """The two statements a delivery runs, built once."""
        from sqlalchemy import bindparam, update
        from sqlalchemy.dialects.sqlite import insert

        leases = self.leases
        self._take = (
            insert(leases)
            .values(job=bindparam("job"), token=1)
            .on_conflict_do_update(index_elements=["job"], set_={"token": leases.c.token + 1})
            .returning(leases.c.token)
        )
        self._swap = (
            update(leases)
            .where(leases.c.job == bindparam("lease_job"), leases.c.token == bindparam("held"))
            .values(outcome=bindparam("done"))
        )

    def _lease(self, connection: Any, jobs: list[str]) -> list[int]:
        """Each job's token, incremented (a first delivery's is 1)."""
        return [connection.execute(self._take, {"job": job}).scalar_one() for job in jobs]

    def _commit(self, connection: Any, leased: list[tuple[str, int]]) -> list[bool]:
        """Each outcome written only under the token its delivery holds."""
        return [
            connection.execute(
                self._swap, {"lease_job": job, "held": token, "done": "done"}
            ).rowcount
            == 1
            for job, token in leased
        ]

    def _inputs(self, tasks: list[tuple[str, list[str], list[str]]]) -> list[list[bytes]]:
        """Each task's inputs read, opened and checked against their digests."""
        return [
            [self.blobs.read(key, digest) for key, digest in zip(keys, digests, strict=True)]
            for _job, keys, digests in tasks
        ]

    def _keep(
        self, tasks: list[tuple[str, list[str], list[str]]], made: list[bytes]
    ) -> list[tuple[list[str], list[str]]]:
        """The work's outputs kept as blobs (the validator's are its inputs)."""
        if self.role == "validator":
            return [(keys, digests) for _job, keys, digests in tasks]
        named = [
            (f"{job}-{self.role}", data) for (job, _, _), data in zip(tasks, made, strict=True)
        ]
        self.blobs.keep(named)
        return [
            ([f"{self.role}/{name}"], [hashlib.sha256(data).hexdigest()]) for name, data in named
        ]

    async def _claimed(self, jobs: list[str]) -> list[bool]:
        """The signer's claim on each job, made once (DESIGN.md invariant 5): a
        key created only if absent; a job claimed before is not signed again."""
        from nats.js.errors import KeyWrongLastSequenceError

        async def claim(job: str) -> bool:
            try:
                await self.gates.create(f"{job}.signer", b"claimed")
            except KeyWrongLastSequenceError:
                return False
            return True

        return list(await asyncio.gather(*(claim(job) for job in jobs)))

    async def group(self, subject: str, messages: list[Any]) -> None:
        tasks, genuine = [], []
        for message in messages:
            if self.wire.check(subject, message.data, message.headers, PRODUCER[STAGES[self.role]]):
                tasks.append(_read_task(message.data))
                genuine.append(message)
            else:
                await message.term()
        if not tasks:
            return
        jobs = [job for job, _, _ in tasks]
        tokens = await self.database.run(lambda c: self._lease(c, jobs))
        if self.role == "signer" and not all(await self._claimed(jobs)):
            raise RuntimeError("a job was claimed before: the skeleton redelivers nothing")
        leased = list(zip(jobs, tokens, strict=True))
        # The group's documents to the sandbox worker and back, in one exchange.
        inputs = self._inputs(tasks)
        made = await self.sandbox.exchange([b"".join(parts) for parts in inputs])

        def finish(connection: Any) -> tuple[list[tuple[list[str], list[str]]], list[bool]]:
            # One thread hop: the work's blobs, then the outcomes under the leases.
            return self._keep(tasks, made), self._commit(connection, leased)

        outputs, won = await self.database.run(finish)
        sends = []
        fresh = []
        for job, (keys, digests), held in zip(jobs, outputs, won, strict=True):
            if held:
                sends.append(self.publish_next(job, keys, digests))
                fresh.append(job)
        if fresh and self.role in EVENT:
            sends.append(self.publish_events(fresh))
        await asyncio.gather(*sends)
        for message in genuine:
            await message.ack()


class Audit(Role):
    async def serve(self) -> None:
        from sqlalchemy import Column, Integer, LargeBinary, MetaData, String, Table

        self.ledger = Table(
            "ledger",
            MetaData(),
            Column("seq", Integer, primary_key=True),
            Column("job", String, nullable=False, index=True),
            Column("entry", String, nullable=False),
            Column("hash", LargeBinary, nullable=False),
        )
        self.database = _database(self.folder / "audit.db", self.ledger)
        self._prepare()
        await self.connect()
        events = await self.js.pull_subscribe_bind(durable="audit-events", stream=EVENTS)
        commits = await self.js.pull_subscribe_bind(durable="commit", stream=WORK)
        print("ready", flush=True)
        slots = self.config["slots"]
        await asyncio.gather(_pull(events, slots, self.group), _pull(commits, slots, self.group))

    def _prepare(self) -> None:
        """The statements a group runs, built once."""
        from sqlalchemy import bindparam, func, select

        ledger = self.ledger
        self._last: bytes | None = None
        self._tail = select(ledger.c.hash).order_by(ledger.c.seq.desc()).limit(1)
        self._held = select(func.count()).where(
            ledger.c.job == bindparam("held_job"), ledger.c.entry.in_(HISTORY)
        )
        self._insert = ledger.insert()

    def _append(
        self, connection: Any, entries: list[tuple[Any, str, str]]
    ) -> tuple[list[str], list[Any]]:
        """Events appended in order; a commit completes its job only when the
        job's history is whole (else it waits: its message comes back). The
        chain's last link is kept for the next group: audit is the ledger's one
        writer, and its transactions run one after another on one thread."""
        last = self._last
        if last is None:
            last = connection.execute(self._tail).scalar() or b""
        rows: list[dict[str, Any]] = []

        def add(job: str, entry: str) -> None:
            nonlocal last
            last = hashlib.sha256(last + f"{job}|{entry}".encode()).digest()
            rows.append({"job": job, "entry": entry, "hash": last})

        for _message, job, entry in entries:
            if entry != "SIGNED":
                add(job, entry)
        if rows:
            connection.execute(self._insert, rows)
            rows = []
        completed, waiting = [], []
        for message, job, entry in entries:
            if entry != "SIGNED":
                continue
            held = connection.execute(self._held, {"held_job": job}).scalar_one()
            if held < len(HISTORY):
                waiting.append(message)
                continue
            add(job, "SIGNED")
            add(job, "COMPLETED")
            completed.append(job)
        if rows:
            connection.execute(self._insert, rows)
        self._last = last
        return completed, waiting

    async def group(self, messages: list[Any]) -> None:
        entries = []
        for message in messages:
            subject = message.subject
            if subject.startswith("skel.events."):
                producer = subject.rsplit(".", 1)[1]
                if self.wire.check(subject, message.data, message.headers, producer):
                    for event in message.data.decode().split(";"):
                        job, entry = event.split("|")
                        entries.append((message, job, entry))
                    continue
            elif self.wire.check(subject, message.data, message.headers, "signer"):
                job, _keys, _digests = _read_task(message.data)
                entries.append((message, job, "SIGNED"))
                continue
            await message.term()
        try:
            completed, waiting = await self.database.run(lambda c: self._append(c, entries))
        except BaseException:
            self._last = None  # read again from the ledger: the group was not appended
            raise
        for job in completed:
            payload = job.encode()
            await self.nc.publish(DONE, payload, headers=self.wire.headers(DONE, payload, job))
        late = {id(message) for message in waiting}
        for message in {id(message): message for message, _job, _entry in entries}.values():
            if id(message) in late:
                await message.nak(delay=0.02)
            else:
                await message.ack()


def _serve(role: str, config_path: str) -> None:
    import uvloop

    config = json.loads(Path(config_path).read_text())
    kinds: dict[str, type[Role]] = {"admission": Admission, "audit": Audit}
    runner = kinds.get(role, StageRole)(role, config)
    uvloop.run(runner.serve())  # type: ignore[attr-defined]


# --- driving it ---------------------------------------------------------------


async def _streams(url: str, slots: int) -> None:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig

    connection = await nats.connect(url)
    try:
        js = connection.jetstream()
        for name, subjects in ((WORK, ["skel.work.*"]), (EVENTS, ["skel.events.*"])):
            await js.add_stream(
                StreamConfig(
                    name=name,
                    subjects=subjects,
                    retention=RetentionPolicy.WORK_QUEUE,
                    storage=StorageType.FILE,
                )
            )
        await js.create_key_value(bucket=GATES, history=1, storage=StorageType.FILE)
        durables = [(WORK, step, f"skel.work.{step}") for step in (*STAGES.values(), "commit")]
        durables.append((EVENTS, "audit-events", "skel.events.*"))
        for stream, durable, subject in durables:
            await js.add_consumer(
                stream,
                ConsumerConfig(
                    durable_name=durable,
                    filter_subject=subject,
                    ack_policy=AckPolicy.EXPLICIT,
                    ack_wait=30,
                    max_ack_pending=4 * slots,
                ),
            )
    finally:
        await connection.close()


async def _after_run(url: str) -> tuple[int, int]:
    """Messages left on the skeleton's streams, once the acks of the last jobs
    are in (a few tenths of a second at most; counted as they are after five),
    and the keys in the signer's gate (one per job it claimed)."""
    import nats

    connection = await nats.connect(url)
    try:
        js = connection.jetstream()
        for _ in range(50):
            left = 0
            for stream in (WORK, EVENTS):
                left += (await js.stream_info(stream)).state.messages
            if left == 0:
                break
            await asyncio.sleep(0.1)
        return left, (await js.stream_info(f"KV_{GATES}")).state.messages
    finally:
        await connection.close()


def _ready(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        readable, _, _ = select.select([process.stdout], [], [], 0.2)
        if readable:
            line = process.stdout.readline()
            if line.startswith("ready"):
                return line.strip()
        if process.poll() is not None:
            raise RuntimeError(f"a skeleton process ended with {process.returncode}")
    raise RuntimeError("a skeleton process did not become ready")


async def _drive(port: int, packets: list[list[Path]], prefix: str, in_flight: int) -> list[float]:
    """Every packet through the skeleton, ``in_flight`` at a time; each one's
    seconds from submit to completed."""
    import grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        submit = channel.unary_unary("/skel.Admission/Submit")
        watch = channel.unary_stream("/skel.Admission/Watch")
        queue = list(enumerate(packets))
        seconds: list[float] = []

        async def one() -> None:
            while queue:
                index, paths = queue.pop()
                packet = _packet(f"{prefix}{index}", paths)
                started = time.perf_counter()
                job = (await submit(packet)).decode()
                async for state in watch(job.encode()):
                    if state != b"COMPLETED":
                        raise RuntimeError("a skeleton job did not complete")
                    seconds.append(time.perf_counter() - started)
                    break

        await asyncio.gather(*(one() for _ in range(in_flight)))
        return seconds


def _ledger_entries(path: Path, prefix: str) -> int:
    import sqlite3

    with sqlite3.connect(path) as connection:
        (count,) = connection.execute(
            "SELECT count(*) FROM ledger WHERE job LIKE ?", (f"{prefix}%",)
        ).fetchone()
    return int(count)


def _driven(port: int, packets: list[list[Path]], prefix: str, in_flight: int) -> list[float]:
    """``_drive``, bounded: a skeleton that stalls ends the run, not the machine."""
    bound = DRIVE_SECONDS + DRIVE_SECONDS_PER_JOB * len(packets)
    return asyncio.run(asyncio.wait_for(_drive(port, packets, prefix, in_flight), bound))


def skeleton_floor(
    folder: Path,
    packets: list[list[Path]],
    in_flight: int,
    warmup: int,
    idle: int = 0,
    passes: int = 1,
) -> Skeleton:
    """``warmup`` of ``packets`` through the skeleton unmeasured, then all of
    them ``passes`` times, measured: CPU of every process (nats-server and this
    one too), the pass that cost least kept; then ``idle`` of them one after
    another, timed."""
    from nacl.signing import SigningKey

    from quire.stack.natsserver import NatsServer
    from quire.stack.ports import free_port

    folder.mkdir(parents=True, exist_ok=True)
    server = NatsServer(folder / "nats", port=free_port(), monitor_port=free_port())
    server.start()
    processes: dict[str, subprocess.Popen[str]] = {}
    try:
        assert server.pid is not None
        asyncio.run(_streams(server.url, in_flight))
        config = {
            "folder": str(folder),
            "nats": server.url,
            "slots": in_flight,
            "key": base64.b64encode(os.urandom(32)).decode(),
            "seeds": {
                role: base64.b64encode(bytes(SigningKey.generate())).decode() for role in ROLES
            },
        }
        config_path = folder / "skeleton.json"
        config_path.write_text(json.dumps(config))
        config_path.chmod(0o600)
        for role in ROLES:
            processes[role] = subprocess.Popen(
                [sys.executable, __file__, role, str(config_path)],
                stdout=subprocess.PIPE,
                text=True,
                cwd=Path(__file__).parent,
            )
        port = 0
        workers: dict[str, int] = {}
        for role, process in processes.items():
            line = _ready(process).split()
            if role == "admission":
                port = int(line[1])
            elif line[1:2] == ["worker"]:
                workers[f"workers:{role}"] = int(line[2])
        _driven(port, packets[:warmup], "warm", in_flight)
        pids = {role: process.pid for role, process in processes.items()}
        pids["nats-server"] = server.pid
        pids.update(workers)
        measured: list[tuple[float, dict[str, float]]] = []
        for index in range(passes):
            before = {kind: process_cpu_seconds(pid) for kind, pid in pids.items()}
            own = own_cpu_seconds()
            started = time.perf_counter()
            _driven(port, packets, f"job{index}-", in_flight)
            seconds = time.perf_counter() - started
            cpu = {kind: process_cpu_seconds(pid) - before[kind] for kind, pid in pids.items()}
            cpu["client"] = own_cpu_seconds() - own
            measured.append((seconds, cpu))
        entries = _ledger_entries(folder / "audit.db", "job")
        left, claims = asyncio.run(_after_run(server.url))
        alone = _driven(port, packets[:idle], "idle", 1) if idle else []
        seconds, cpu = min(measured, key=lambda each: sum(each[1].values()))
        totals = tuple(sum(each.values()) / len(packets) * 1000 for _, each in measured)
        return Skeleton(len(packets), seconds, cpu, entries, left, tuple(alone), claims, totals)
    finally:
        for process in processes.values():
            process.send_signal(signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        server.stop()


if __name__ == "__main__":
    if sys.argv[1] == "sandbox":
        _sandbox()
    else:
        sys.path.insert(0, str(Path(__file__).parent))
        _serve(sys.argv[1], sys.argv[2])
