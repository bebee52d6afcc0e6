"""AIP-158 paging on every List RPC (``quire.paging``).

Each List is walked page by page through at least three pages: every item
once, in a stable order, the last page without a token. Tokens a client made
up or changed, tokens from another List and tokens from the same List under
other filters are refused (INVALID_ARGUMENT, ``INVALID_PAGE``, a violation on
``page_token``); a negative page size is refused and one over the maximum is
served as the maximum.

ListTenants, ListJobs, ListJobEvents, ListRulesets and ListReviews are walked
on the session stack. ListKeys and ListDeadLetters are walked on their real
servicers, over gRPC, on a real database outside the stack: rotating the
session stack's key would change the version later tests' jobs are signed
with, and a dead letter takes a stack whose stage is killed until JetStream
gives up (``test_dead_letter_ops``).
"""

from __future__ import annotations

import base64
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table, select

from quire.audit import tables as audit_tables
from quire.audit.deadletterdesk import DeadLetterDesk
from quire.audit.servicer import AuditServicer
from quire.audit.v1 import audit_service_pb2 as apb
from quire.audit.v1 import audit_service_pb2_grpc as agrpc
from quire.cli.args import bearer_metadata
from quire.client import AdmissionClient, PacketItem
from quire.database import Database
from quire.errors import InvalidInput
from quire.grpcstatus import details_of
from quire.identity import IdentitySettings, ServiceIdentity, provision_identities
from quire.jobs import state_name
from quire.paging import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, PageTokens, keyset_after, page_size
from quire.signer import tables as signer_tables
from quire.signer.keystore import GeneratedKeys, KeyStore
from quire.signer.servicer import SignerServicer
from quire.signer.v1 import signer_service_pb2 as spb
from quire.signer.v1 import signer_service_pb2_grpc as sgrpc
from quire.stack.supervisor import StackInfo
from quire.testing.pdfs import write_form_pdf, write_text_pdf
from quire.validator.v1 import validator_service_pb2 as vpb
from quire.validator.v1 import validator_service_pb2_grpc as vgrpc

Fetch = Callable[[int, str], Awaitable[tuple[list[Any], str]]]
"""One page: (page_size, page_token) -> (items, next_page_token)."""


# -- helpers ---------------------------------------------------------------


async def _walk(fetch: Fetch, size: int) -> list[list[Any]]:
    """Every page from the first, following next_page_token to an empty one."""
    pages: list[list[Any]] = []
    token = ""
    for _ in range(10_000):  # bounded: a server that never ends fails here
        items, token = await fetch(size, token)
        assert len(items) <= size
        pages.append(items)
        if not token:
            return pages
        assert items, "a page with a next token serves something"
    raise AssertionError("paging never ended")


def _flipped(token: str) -> str:
    """The token with one byte of its middle changed."""
    raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    raw[len(raw) // 2] ^= 0x01
    return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


def _forged() -> list[str]:
    random = base64.urlsafe_b64encode(secrets.token_bytes(48)).decode().rstrip("=")
    made_up = base64.urlsafe_b64encode(b'{"q":"x","p":[1]}' + b"\0" * 32).decode()
    return [random, made_up, "not base64 at all!", "A" * 5000]


async def _refused(call: Awaitable[object], field: str = "page_token") -> str:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = details_of(refused.value)
    assert details.reason == "INVALID_PAGE"
    assert [v[0] for v in details.violations] == [field]
    return details.violations[0][1]


async def _refuses_bad_tokens(fetch: Fetch, real: str) -> None:
    """Forged tokens and the real one with a byte changed are refused."""
    assert real
    for token in [*_forged(), _flipped(real)]:
        await _refused(fetch(2, token))
    await _refused(fetch(-1, ""), field="page_size")


def _assert_walked(pages: list[list[Any]], everything: list[Any], mine: set[Any]) -> None:
    """At least three pages, nothing twice, nothing missing, the full order."""
    walked = [item for page in pages for item in page]
    assert len(pages) >= 3
    assert len(walked) == len(set(walked)), "no item on two pages"
    assert walked == everything, "the same items in the same order as one big page"
    assert mine <= set(walked)


# -- quire.paging on its own ------------------------------------------------


def test_page_size_defaults_clamps_and_refuses_negative() -> None:
    assert page_size(0) == DEFAULT_PAGE_SIZE == 50
    assert page_size(7) == 7
    assert page_size(MAX_PAGE_SIZE + 1) == MAX_PAGE_SIZE == 1000
    with pytest.raises(InvalidInput) as refused:
        page_size(-1)
    assert refused.value.reason.value == "INVALID_PAGE"
    assert [v.field for v in refused.value.violations] == ["page_size"]


def test_a_token_holds_its_position_for_the_same_list_and_filters() -> None:
    tokens = PageTokens.ephemeral()
    when = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    first = tokens.page("svc/ListThings", 2, "", {"state": 3})
    assert first.after is None and first.size == 2 and first.fetch == 3
    token = first.next_token((when, "things/a", 7))
    again = tokens.page("svc/ListThings", 5, token, {"state": 3})  # another size is fine
    assert again.after == (when, "things/a", 7) and again.size == 5


@pytest.mark.parametrize(
    ("rpc", "filters", "says"),
    [
        ("svc/ListOthers", {"state": 3}, "not a page token of this List"),
        ("svc/ListThings", {"state": 4}, "issued for a request with other filters"),
        ("svc/ListThings", {}, "issued for a request with other filters"),
    ],
)
def test_a_token_is_refused_by_another_list_or_under_other_filters(
    rpc: str, filters: dict[str, int], says: str
) -> None:
    tokens = PageTokens.ephemeral()
    token = tokens.page("svc/ListThings", 2, "", {"state": 3}).next_token(("a",))
    with pytest.raises(InvalidInput) as refused:
        tokens.page(rpc, 2, token, filters)
    assert refused.value.reason.value == "INVALID_PAGE"
    assert [(v.field, v.description) for v in refused.value.violations] == [("page_token", says)]


def test_forged_and_changed_tokens_are_refused() -> None:
    tokens = PageTokens.ephemeral()
    real = tokens.page("svc/List", 2, "").next_token(("b", 9))
    for token in [*_forged(), _flipped(real), real[:-1], real + "A", "="]:
        with pytest.raises(InvalidInput) as refused:
            tokens.page("svc/List", 2, token)
        assert [v.field for v in refused.value.violations] == ["page_token"]
    stranger = PageTokens.ephemeral()  # another service's key
    with pytest.raises(InvalidInput):
        stranger.page("svc/List", 2, real)


def test_every_replica_of_a_service_and_every_restart_derives_the_same_key(
    tmp_path: Path,
) -> None:
    provision_identities(tmp_path, ["audit", "signer"])

    def loaded(service: str) -> PageTokens:
        return PageTokens.for_service(
            IdentitySettings(
                service=service, key_file=tmp_path / f"{service}.key", trust_dir=tmp_path
            )
        )

    token = loaded("audit").page("a/List", 1, "").next_token((41,))
    assert loaded("audit").page("a/List", 1, token).after == (41,)  # a second process
    with pytest.raises(InvalidInput):
        loaded("signer").page("a/List", 1, token)
    with pytest.raises(InvalidInput):
        PageTokens.from_identity(ServiceIdentity.generate("audit")).page("a/List", 1, token)


@pytest.mark.parametrize("descending", [False, True])
def test_keyset_pages_over_equal_timestamps_serve_every_row_once_in_order(
    tmp_path: Path, descending: bool
) -> None:
    metadata = MetaData()
    things = Table(
        "things",
        metadata,
        Column("id", String(8), primary_key=True),
        Column("created_at", DateTime(timezone=True), nullable=False),
        Column("n", Integer),
    )
    database = Database(f"sqlite:///{tmp_path / 'things.db'}", metadata)
    database.create_schema()
    base = datetime(2025, 5, 1, tzinfo=UTC)
    rows = [  # three rows share each timestamp: the id breaks the ties
        {"id": f"t{i:02d}", "created_at": base + timedelta(seconds=i // 3), "n": i}
        for i in range(11)
    ]
    database.transaction(lambda s: s.execute(things.insert(), rows))
    tokens = PageTokens.ephemeral()
    order = (things.c.created_at, things.c.id)

    def fetch(token: str) -> tuple[list[str], str]:
        page = tokens.page("t/List", 4, token)
        query = select(things).limit(page.fetch)
        query = query.order_by(*(c.desc() if descending else c for c in order))
        beyond = keyset_after(order, page.after, descending=descending)
        if beyond is not None:
            query = query.where(beyond)
        found = database.transaction(lambda s: list(s.execute(query)))
        served, next_token = page.cut(found, lambda r: (r.created_at, r.id))
        return [r.id for r in served], next_token

    walked, token, pages = [], "", 0
    while True:
        ids, token = fetch(token)
        walked += ids
        pages += 1
        if not token:
            break
    expected = sorted((r["id"] for r in rows), reverse=descending)
    assert walked == expected and pages == 3
    database.close()


# -- the session stack ------------------------------------------------------


@dataclass(frozen=True)
class Operator:
    info: StackInfo

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return bearer_metadata(self.info.operator_token())


@pytest.fixture
def operator(stack) -> Operator:  # type: ignore[no-untyped-def]
    return Operator(StackInfo.read(stack.data_dir))


@pytest.mark.stack
async def test_list_tenants_pages_in_creation_order(tenants) -> None:  # type: ignore[no-untyped-def]
    mine = [await tenants("paging") for _ in range(7)]
    admin = tenants.admin

    async def fetch(size: int, token: str) -> tuple[list[Any], str]:
        page = await admin.list_tenants_page(page_size=size, page_token=token)
        return [t.name for t in page.tenants], page.next_page_token

    pages = await _walk(fetch, 3)
    everything = [t.name for t in await admin.list_tenants()]
    _assert_walked(pages, everything, {client.tenant for client in mine})
    listed = {t.name: t for t in (await admin.list_tenants_page(page_size=MAX_PAGE_SIZE)).tenants}
    created = [listed[name].create_time.ToDatetime() for name in everything]
    assert created == sorted(created), "creation order"

    real = (await fetch(3, ""))[1]
    await _refuses_bad_tokens(fetch, real)
    clamped = await admin.list_tenants_page(page_size=MAX_PAGE_SIZE * 10)
    assert 0 < len(clamped.tenants) <= MAX_PAGE_SIZE


@pytest.mark.stack
async def test_list_jobs_and_job_events_page_and_bind_tokens_to_their_filters(
    tenants, operator: Operator, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    client: AdmissionClient = await tenants("paging-jobs")
    other: AdmissionClient = await tenants("paging-jobs-other")
    digest = (await client.upload(write_text_pdf(tmp_path / "p.pdf", ["paging"]))).sha256
    submitted = [(await client.submit([PacketItem("p", digest)])).name for _ in range(5)]

    async def jobs(size: int, token: str) -> tuple[list[Any], str]:
        page = await client.list_jobs(page_size=size, page_token=token)
        return [j.name for j in page.jobs], page.next_page_token

    pages = await _walk(jobs, 2)
    _assert_walked(pages, list(reversed(submitted)), set(submitted))  # newest first
    real = (await jobs(2, ""))[1]
    await _refuses_bad_tokens(jobs, real)
    says = await _refused(other.list_jobs(page_size=2, page_token=real))  # another tenant's
    assert "other filters" in says
    await _refused(client.list_jobs(page_size=2, page_token=real, state="COMPLETED"))
    # Same service, same key: a token of one of admission's Lists is no token of the other.
    admin_token = (await tenants.admin.list_tenants_page(page_size=1)).next_page_token
    await _refused(jobs(2, admin_token))
    await _refused(tenants.admin.list_tenants_page(page_size=1, page_token=real))

    done = await client.wait(submitted[0], timeout=60)
    assert state_name(done.state) == "COMPLETED"
    async with grpc.aio.insecure_channel(operator.info.endpoints["audit"]) as channel:
        audit = agrpc.AuditServiceStub(channel)

        async def events(size: int, token: str, job: str = submitted[0]) -> tuple[list[Any], str]:
            reply = await audit.ListJobEvents(
                apb.ListJobEventsRequest(job=job, page_size=size, page_token=token),
                metadata=operator.metadata,
            )
            return [e.sequence for e in reply.entries], reply.next_page_token

        everything = (await events(MAX_PAGE_SIZE * 10, ""))[0]  # clamped, not refused
        pages = await _walk(events, 2)
        _assert_walked(pages, everything, set(everything))
        assert everything == sorted(everything) and len(everything) >= 5
        real = (await events(2, ""))[1]
        await _refuses_bad_tokens(events, real)
        says = await _refused(events(2, real, job=submitted[1]))  # another job's token
        assert "other filters" in says


@pytest.mark.stack
async def test_list_rulesets_pages_by_name_and_version(operator: Operator) -> None:
    async with grpc.aio.insecure_channel(operator.info.endpoints["validator"]) as channel:
        validator = vgrpc.ValidatorServiceStub(channel)

        async def fetch(size: int, token: str) -> tuple[list[Any], str]:
            reply = await validator.ListRulesets(
                vpb.ListRulesetsRequest(page_size=size, page_token=token),
                metadata=operator.metadata,
            )
            return [r.version for r in reply.rulesets], reply.next_page_token

        everything = (await fetch(0, ""))[0]
        pages = await _walk(fetch, 1)
        _assert_walked(pages, everything, {"default@1", "lease-renewal@1"})
        await _refuses_bad_tokens(fetch, (await fetch(1, ""))[1])


@pytest.mark.stack
async def test_list_reviews_pages_oldest_first(
    client: AdmissionClient, operator: Operator, tmp_path: Path
) -> None:
    unsigned = {"property_address": "1 Main St", "tenant_signature": "A. Tenant"}
    text = "The renewal term is twelve months. Monthly rent: 1,200. Lead-based paint disclosure."
    path = write_form_pdf(tmp_path / "lease.pdf", [text, uuid.uuid4().hex], unsigned)
    digest = (await client.upload(path)).sha256
    parked = [
        (await client.submit([PacketItem("l", digest)], ruleset="lease-renewal")).name
        for _ in range(3)
    ]
    for name in parked:
        assert state_name((await client.wait(name, timeout=60)).state) == "NEEDS_REVIEW"
    async with grpc.aio.insecure_channel(operator.info.endpoints["validator"]) as channel:
        validator = vgrpc.ValidatorServiceStub(channel)

        async def fetch(size: int, token: str) -> tuple[list[Any], str]:
            reply = await validator.ListReviews(
                vpb.ListReviewsRequest(page_size=size, page_token=token),
                metadata=operator.metadata,
            )
            return [r.job for r in reply.reviews], reply.next_page_token

        try:
            everything = (await fetch(MAX_PAGE_SIZE, ""))[0]
            pages = await _walk(fetch, 1)
            _assert_walked(pages, everything, set(parked))
            listed = (
                await validator.ListReviews(vpb.ListReviewsRequest(), metadata=operator.metadata)
            ).reviews
            keys = [(r.create_time.ToDatetime(), r.job) for r in listed]
            assert keys == sorted(keys), "oldest first, ties by job"
            await _refuses_bad_tokens(fetch, (await fetch(1, ""))[1])
            rulesets = await validator.ListRulesets(
                vpb.ListRulesetsRequest(page_size=1), metadata=operator.metadata
            )
            await _refused(fetch(1, rulesets.next_page_token))  # another List's token
        finally:
            for name in parked:  # leave no parked jobs for later tests
                await validator.ResolveReview(
                    vpb.ResolveReviewRequest(
                        job=name, approve=False, note="paging test", operator="t"
                    ),
                    metadata=operator.metadata,
                )


# -- real servicers outside the stack -----------------------------------------


class AnyOperator:
    """Stands in for the operator check: every caller is operator ``op``."""

    async def operator_of(self, context: object) -> str:
        return "op"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[grpc.aio.Channel]:
    """The signer's and audit's servicers on a gRPC server on 127.0.0.1, on
    SQLite databases, with page tokens keyed from generated identities."""
    signer_db = Database(f"sqlite:///{tmp_path / 'signer.db'}", signer_tables.metadata)
    signer_db.create_schema()
    keys = KeyStore(signer_db, GeneratedKeys(tmp_path / "keys"))
    keys.ensure_active_key()
    audit_db = Database(f"sqlite:///{tmp_path / 'audit.db'}", audit_tables.metadata)
    audit_db.create_schema()
    start = datetime(2025, 3, 1, tzinfo=UTC)
    letters = [
        {
            "job": f"jobs/{i:028x}",
            "tenant": "t",
            "stage": "sign",
            "reason_code": "SIGNING_FAILED",
            "deliveries": 2,
            "generation": 1,
            "task": b"",
            "status": "discarded" if i % 3 == 0 else "dead",
            "dead_at": start + timedelta(seconds=i // 2),  # pairs share a time
            "resolved_at": None,
            "resolved_by": "",
        }
        for i in range(10)
    ]
    audit_db.transaction(lambda s: s.execute(audit_tables.dead_letters.insert(), letters))
    desk = DeadLetterDesk(audit_db, None, None, "test")  # type: ignore[arg-type]
    server = grpc.aio.server()
    sgrpc.add_SignerServiceServicer_to_server(
        SignerServicer(
            signer_db, keys, pages=PageTokens.from_identity(ServiceIdentity.generate("signer"))
        ),
        server,
    )
    agrpc.add_AuditServiceServicer_to_server(
        AuditServicer(
            audit_db,
            dead_letters=desk,
            operators=AnyOperator(),  # type: ignore[arg-type]
            pages=PageTokens.from_identity(ServiceIdentity.generate("audit")),
        ),
        server,
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield channel
    finally:
        await server.stop(None)
        signer_db.close()
        audit_db.close()


async def test_list_keys_pages_through_rotations(served: grpc.aio.Channel) -> None:
    signer = sgrpc.SignerServiceStub(served)
    rotated = [(await signer.RotateKey(spb.RotateKeyRequest())).version for _ in range(4)]

    async def fetch(size: int, token: str) -> tuple[list[Any], str]:
        reply = await signer.ListKeys(spb.ListKeysRequest(page_size=size, page_token=token))
        return [k.version for k in reply.keys], reply.next_page_token

    pages = await _walk(fetch, 2)
    _assert_walked(pages, ["v1", *rotated], {"v1", *rotated})
    assert rotated == ["v2", "v3", "v4", "v5"]
    await _refuses_bad_tokens(fetch, (await fetch(2, ""))[1])
    assert len((await fetch(MAX_PAGE_SIZE + 1, ""))[0]) == 5


async def test_list_dead_letters_pages_under_each_filter(served: grpc.aio.Channel) -> None:
    audit = agrpc.AuditServiceStub(served)

    def fetch_with(include_resolved: bool) -> Fetch:
        async def fetch(size: int, token: str) -> tuple[list[Any], str]:
            reply = await audit.ListDeadLetters(
                apb.ListDeadLettersRequest(
                    include_resolved=include_resolved, page_size=size, page_token=token
                )
            )
            return [d.job for d in reply.dead_letters], reply.next_page_token

        return fetch

    every = [f"jobs/{i:028x}" for i in range(10)]
    open_ones = [job for i, job in enumerate(every) if i % 3]
    _assert_walked(await _walk(fetch_with(True), 3), every, set(every))
    _assert_walked(await _walk(fetch_with(False), 2), open_ones, set(open_ones))
    resolved_token = (await fetch_with(True)(3, ""))[1]
    await _refuses_bad_tokens(fetch_with(True), resolved_token)
    says = await _refused(fetch_with(False)(3, resolved_token))
    assert "other filters" in says
    events = await audit.ListJobEvents(apb.ListJobEventsRequest(job=every[0], page_size=1))
    assert events.next_page_token == ""  # no events: one empty page
    await _refused(
        audit.ListJobEvents(
            apb.ListJobEventsRequest(job=every[0], page_size=3, page_token=resolved_token)
        )
    )
