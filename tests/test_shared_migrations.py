"""The tables several services keep alike are migrated by one module
(``quire.sharedmigrations``): no service's chain writes their DDL again."""

from __future__ import annotations

import ast
from pathlib import Path

from sqlalchemy import MetaData

from quire.diagnosticstore import diagnostic_tables
from quire.idempotency import request_ids_table
from quire.leases import lease_table

ROOT = Path(__file__).resolve().parents[1]


def _shared_tables() -> set[str]:
    metadata = MetaData()
    request_ids_table(metadata)
    lease_table(metadata)
    diagnostic_tables(metadata)
    return set(metadata.tables)


def _created(path: Path) -> set[str]:
    """Tables a revision creates with its own ``op.create_table``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "create_table"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(node.args[0].value)
    return names


def test_no_chain_writes_a_shared_tables_ddl_again() -> None:
    shared = _shared_tables()
    assert {"stage_leases", "request_ids", "diagnostics", "diagnostic_reads"} <= shared
    revisions = sorted((ROOT / "services").glob("*/quire/*/migrations/*.py"))
    assert len(revisions) > 10
    copies = {str(p.relative_to(ROOT)): _created(p) & shared for p in revisions}
    assert {path: tables for path, tables in copies.items() if tables} == {}
    users = [p for p in revisions if "quire.sharedmigrations" in p.read_text()]
    assert len(users) >= 15, "each service that keeps them adds them through the shared module"
