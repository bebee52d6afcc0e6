"""``quire sources put|list|remove`` as an operator runs it: a separate
process against the session's embedded stack, its results as one JSON
document with ``--json``, a refusal with its field violations and exit code."""

from __future__ import annotations

import json
import uuid

import pytest

from quire.cli.exitcodes import ExitCode
from quire.testing.quirecli import run_quire

pytestmark = pytest.mark.stack


def _json(result) -> dict:  # type: ignore[no-untyped-def, type-arg]
    assert "Traceback" not in result.stderr, result.stderr
    return json.loads(result.stdout)


def test_an_operator_puts_lists_and_removes_a_source_system(stack) -> None:  # type: ignore[no-untyped-def]
    data_dir = stack.data_dir
    created = run_quire(data_dir, "tenants", "create", f"cli-{uuid.uuid4().hex[:8]}", "--json")
    assert created.returncode == ExitCode.OK, created.stderr
    tenant = _json(created)["tenant"]["name"]

    put = run_quire(
        data_dir,
        "sources",
        "put",
        tenant,
        "orders",
        "--url",
        "https://erp.example/v1",
        "--credential",
        "env:QUIRE_SOURCE_CREDENTIAL_ERP",
        "--timeout",
        "2.5s",
        "--max-bytes",
        "1048576",
        "--schema",
        "order-lines@1",
        "--json",
    )
    assert put.returncode == ExitCode.OK, put.stderr
    system = _json(put)["source_system"]
    assert system["name"] == f"{tenant}/sourceSystems/orders"
    assert (system["base_url"], system["credential_ref"], system["schema"]) == (
        "https://erp.example/v1",
        "env:QUIRE_SOURCE_CREDENTIAL_ERP",
        "order-lines@1",
    )
    assert system["timeout"] == "2.500s" and int(system["max_bytes"]) == 1048576

    bare_id = tenant.removeprefix("tenants/")
    second = run_quire(data_dir, "sources", "put", bare_id, "carrier", "--url", "http://c.example")
    assert second.returncode == ExitCode.OK, second.stderr
    assert f"{tenant}/sourceSystems/carrier  http://c.example  timeout=5s" in second.stdout

    listed = run_quire(data_dir, "sources", "list", tenant, "--json")
    assert listed.returncode == ExitCode.OK, listed.stderr
    names = [s["name"] for s in _json(listed)["source_systems"]]
    assert names == [f"{tenant}/sourceSystems/carrier", f"{tenant}/sourceSystems/orders"]

    removed = run_quire(data_dir, "sources", "remove", tenant, "orders", "--json")
    assert removed.returncode == ExitCode.OK, removed.stderr
    assert _json(removed) == {"name": f"{tenant}/sourceSystems/orders", "deleted": True}
    again = run_quire(data_dir, "sources", "remove", tenant, "orders", "--json")
    assert _json(again)["deleted"] is False
    left = _json(run_quire(data_dir, "sources", "list", tenant, "--json"))["source_systems"]
    assert [s["name"] for s in left] == [f"{tenant}/sourceSystems/carrier"]


def test_a_refused_registration_exits_refused_with_its_violations(stack) -> None:  # type: ignore[no-untyped-def]
    data_dir = stack.data_dir
    tenant = _json(
        run_quire(data_dir, "tenants", "create", f"cli-{uuid.uuid4().hex[:8]}", "--json")
    )["tenant"]["name"]
    refused = run_quire(
        data_dir,
        "sources",
        "put",
        tenant,
        "orders",
        "--url",
        "ftp://erp.example",
        "--credential",
        "hunter2",
        "--json",
    )
    assert refused.returncode == ExitCode.REFUSED, refused.stderr
    error = _json(refused)["error"]
    assert (error["status"], error["reason"]) == ("INVALID_ARGUMENT", "INVALID_TENANT")
    assert sorted((v["field"], v["reason"]) for v in error["field_violations"]) == [
        ("source_system.base_url", "BAD_BASE_URL"),
        ("source_system.credential_ref", "BAD_CREDENTIAL_REF"),
    ]
    assert "hunter2" not in refused.stdout + refused.stderr, "a credential is never echoed"
    unknown = run_quire(data_dir, "sources", "list", "tenants/no-such-tenant")
    assert unknown.returncode == ExitCode.REFUSED and "NOT_FOUND" in unknown.stderr
    bad_timeout = run_quire(
        data_dir, "sources", "put", tenant, "orders", "--url", "https://x", "--timeout", "soon"
    )
    assert bad_timeout.returncode == ExitCode.USAGE
    assert "not a number of seconds" in bad_timeout.stderr
