"""The rules around fetching a source named by reference, each on its own:
the content sniff (the upload door's rule), canonical JSON and duplicate
events, the shipped schemas, credentials, the budget and the settings."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from google.protobuf import timestamp_pb2

from quire.errors import InvalidSetting, SystemFailure
from quire.reasons import ReasonCode
from quire.type import queue_pb2
from quire.typesniff import looks_like
from quire.validator.sources.budget import FetchBudget
from quire.validator.sources.credentials import resolve_credential
from quire.validator.sources.fetcher import source_url
from quire.validator.sources.normalise import (
    CANONICAL_JSON,
    DUPLICATE_EVENTS_DROPPED,
    normalise_json,
)
from quire.validator.sources.schemas import is_shipped, schema_error, shipped_schemas
from quire.validator.sources.settings import SourceSettings

CORPUS = Path(__file__).resolve().parents[1] / "bench" / "eval" / "corpus"


@pytest.mark.parametrize(
    ("content_type", "head", "ok"),
    [
        ("application/pdf", b"%PDF-1.7\n%\xe2\xe3", True),
        ("application/pdf", b"\xef\xbb\xbf  junk %PDF1.4 rest", True),
        ("application/pdf", b"%PDF-X.Y", False),
        ("application/pdf", b'{"a": 1}', False),
        ("application/json", b'\xef\xbb\xbf \r\n {"a": 1}', True),
        ("application/json", b"[1, 2]", True),
        ("application/json", b"%PDF-1.7", False),
        ("application/json", b"", False),
        ("text/plain", b"anything", True),  # no rule: judged by the sandbox
    ],
)
def test_the_sniff_is_the_upload_doors_rule(content_type: str, head: bytes, ok: bool) -> None:
    assert looks_like(content_type, head) is ok


def test_canonical_json_sorts_keys_drops_whitespace_and_keeps_numbers_exact() -> None:
    raw = b'{"b": 1.10, "a": [1, 2E+5, "\\u00e9\\u2028", 12345678901234567890.5]}'
    result = normalise_json(raw)
    assert result.parsed and result.codes == (CANONICAL_JSON,)
    assert result.data == '{"a":[1,2E+5,"é\u2028",12345678901234567890.5],"b":1.10}'.encode()
    assert result.document["b"] == Decimal("1.10")
    assert normalise_json(result.data).codes == (), "the canonical form is a fixed point"


def test_exact_duplicate_events_are_dropped_first_kept_in_place() -> None:
    one = {"at": "2026-11-01T08:15:00Z", "code": "A"}
    two = {"at": "2026-11-01T09:15:00Z", "code": "B"}
    same_as_one = {"code": "A", "at": "2026-11-01T08:15:00Z"}  # other key order: same event
    near = {"at": "2026-11-01T08:15:00Z", "code": "A", "remark": "x"}
    sent = {"shipment": {"events": [one, two, same_as_one, near, two]}, "events": [1, 1, 2]}
    result = normalise_json(json.dumps(sent).encode())
    assert result.codes == (CANONICAL_JSON, DUPLICATE_EVENTS_DROPPED)
    kept = json.loads(result.data)
    assert kept["shipment"]["events"] == [one, two, near]
    assert kept["events"] == [1, 2]
    clean = normalise_json(
        json.dumps({"shipment": {"events": [one, two, near]}, "events": [1, 2]}).encode()
    )
    assert clean.data == result.data


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": 1, "a": 2}',  # which value counts depends on the reader
        b'{"a": NaN}',
        b'{"a": Infinity}',
        b'{"a": "\\ud800"}',  # a lone surrogate: no UTF-8 for it
        b'{"a": 1',
        b"\xff\xfe{}",
        b"[" * 200_000 + b"]" * 200_000,
    ],
)
def test_what_canonical_json_cannot_say_the_same_way_is_kept_as_sent(raw: bytes) -> None:
    result = normalise_json(raw)
    assert not result.parsed and result.document is None
    assert result.data == raw and result.codes == ()


def test_the_shipped_schemas_accept_their_corpus_records() -> None:
    assert shipped_schemas() == ["carrier-events@1", "order-lines@1", "tax-record@1"]
    for schema, record in (
        ("carrier-events@1", "carrier-events.json"),
        ("tax-record@1", "tax-record.json"),
    ):
        document = normalise_json((CORPUS / record).read_bytes()).document
        assert schema_error(schema, document) == "", schema
    invoice = normalise_json((CORPUS / "invoice-short.json").read_bytes()).document
    assert schema_error("order-lines@1", invoice["invoice"]) == ""
    assert schema_error("order-lines@1", {"lines": [], "total": "1.00"}) != ""
    lines = {"lines": [{"description": "freight", "quantity": "3", "unit_price": "0.10"}]}
    assert schema_error("order-lines@1", lines) == ""
    assert not is_shipped("order-lines@2") and is_shipped("order-lines@1")


@pytest.mark.parametrize(
    ("schema", "document", "where"),
    [
        (
            "tax-record@1",
            {"tax": {"jurisdiction": "nl", "registration": "x", "breakdown": []}},
            "jurisdiction",
        ),
        (
            "tax-record@1",
            {
                "tax": {
                    "jurisdiction": "NL",
                    "registration": "x",
                    "breakdown": [{"base": 1, "rate": "1", "tax": "1"}],
                }
            },
            "base",
        ),
        (
            "carrier-events@1",
            {"shipment": {"carrier": "c", "events": [{"at": "yesterday", "code": "A"}]}},
            "at",
        ),
        (
            "carrier-events@1",
            {
                "shipment": {
                    "carrier": "c",
                    "events": [{"at": "2026-11-01T08:15:00Z", "code": "picked"}],
                }
            },
            "code",
        ),
        ("carrier-events@1", {"shipment": {"events": []}}, "required"),
    ],
)
def test_a_mismatch_names_where_in_the_schema_never_a_value(
    schema: str, document: object, where: str
) -> None:
    error = schema_error(schema, document)
    assert where in error
    assert "yesterday" not in error and "picked" not in error
    assert schema_error(schema, None, parsed=False) == "(not JSON)"


async def test_credentials_come_from_the_environment_or_a_file_at_call_time(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "source-credentials"
    folder.mkdir()
    name = "QUIRE_SOURCE_CREDENTIAL_ERP"
    assert await resolve_credential("", directory=folder, env={}) is None
    got = await resolve_credential(f"env:{name}", directory=folder, env={name: " abc.def \n"})
    assert got == "abc.def"
    secret = folder / "token"
    secret.write_text("  s3cret\n")
    assert await resolve_credential(f"file:{secret}", directory=folder, env={}) == "s3cret"
    key = tmp_path / "identity.pem"  # beside the directory, not in it
    key.write_text("PRIVATE KEY\n")
    (folder / "link").symlink_to(key)
    for reference, env in (
        (f"env:{name}", {}),
        (f"env:{name}", {name: "two words"}),
        (f"env:{name}", {name: "line\r\nInjected: 1"}),
        ("env:OTEL_EXPORTER_OTLP_HEADERS", {"OTEL_EXPORTER_OTLP_HEADERS": "api-key=x"}),
        ("env:QUIRE_SIGNER_PKCS11_PIN", {"QUIRE_SIGNER_PKCS11_PIN": "1234"}),
        (f"file:{folder / 'missing'}", {}),
        (f"file:{key}", {}),  # outside the directory
        (f"file:{folder}/../identity.pem", {}),  # climbing out
        (f"file:{folder / 'link'}", {}),  # a link out of it
        ("file:relative/path", {}),
        ("vault:secret/x", {}),
    ):
        with pytest.raises(SystemFailure) as refused:
            await resolve_credential(reference, directory=folder, env=env)
        assert refused.value.reason is ReasonCode.SOURCE_REFUSED
        for shown in ("two words", "Injected", "api-key", "1234", "PRIVATE"):
            assert shown not in str(refused.value)


def test_a_key_is_quoted_but_for_its_slashes_and_cannot_climb() -> None:
    assert (
        source_url("http://h/erp/", "orders/2026/A 17:x") == "http://h/erp/orders/2026/A%2017%3Ax"
    )
    for key in ("../admin", "a/./b", "a/.."):
        with pytest.raises(Exception) as refused:
            source_url("http://h/erp", key)
        assert getattr(refused.value, "reason", None) is ReasonCode.SOURCE_NOT_FOUND


def test_the_budget_is_the_deadline_less_the_reserve() -> None:
    now = [1000.0]
    task = queue_pb2.JobTask()
    unlimited = FetchBudget.of(task, 5.0, lambda: now[0])
    assert not unlimited.limited and not unlimited.passed()
    assert unlimited.call_timeout(5.0) == 5.0
    task.deadline.CopyFrom(timestamp_pb2.Timestamp(seconds=1012))
    budget = FetchBudget.of(task, 5.0, lambda: now[0])
    assert budget.fetch_deadline == 1007.0 and budget.remaining() == 7.0
    assert budget.call_timeout(5.0) == 5.0 and budget.call_timeout(10.0) == 7.0
    now[0] = 1011.0
    assert budget.remaining() == -4.0 and not budget.passed()
    now[0] = 1012.0
    assert budget.passed()


def test_settings_from_the_environment() -> None:
    assert SourceSettings.from_env({}) == SourceSettings()
    read = SourceSettings.from_env(
        {
            "QUIRE_SOURCE_BREAKER_FAILURES": "2",
            "QUIRE_SOURCE_BREAKER_OPEN_SECONDS": "2.5",
            "QUIRE_JOB_BUDGET_RESERVE_SECONDS": "3",
        }
    )
    assert (read.breaker_failures, read.breaker_open_seconds, read.budget_reserve_seconds) == (
        2,
        2.5,
        3.0,
    )
    for name, value in (
        ("QUIRE_SOURCE_BREAKER_FAILURES", "0"),
        ("QUIRE_SOURCE_BREAKER_OPEN_SECONDS", "soon"),
        ("QUIRE_JOB_BUDGET_RESERVE_SECONDS", "-1"),
    ):
        with pytest.raises(InvalidSetting) as refused:
            SourceSettings.from_env({name: value})
        assert refused.value.variable == name
