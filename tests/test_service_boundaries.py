"""Each service owns its tables (DESIGN.md: "No service reads another's
tables; it asks over gRPC. The operator tools ask too."): no module of any
distribution imports ``quire.<service>.tables`` but that service's own, and
the operator tools (``libs/ops``) import no service's code at all, only the
generated APIs (``quire.<service>.v1``), lazy imports inside functions
included. They start the services as processes (``quire.stack``) and read
what the services export (``quire.servicerecords``)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from quire.pipeline import SERVICES

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTED = sorted(
    {*SERVICES, *(path.name for path in (ROOT / "services").iterdir() if path.is_dir())}
)
"""Every service distribution's package name (the gateway's too)."""


def _sources(top: Path) -> Iterator[Path]:
    for path in top.rglob("*.py"):
        if (
            "quire" in path.parts
            and "build" not in path.parts
            and not path.name.endswith(("_pb2.py", "_pb2_grpc.py"))
        ):
            yield path


def imported(source: str) -> set[str]:
    """Every module ``source`` imports, anywhere in it (``from a import b``
    counts as ``a.b`` too, as ``b`` may be a module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _service_of(module: str) -> str | None:
    """The service whose code ``module`` is (None: not a service's, or its
    generated API, ``quire.<service>.v1``)."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "quire" or parts[1] not in DISTRIBUTED:
        return None
    if len(parts) >= 3 and parts[2] == "v1":
        return None
    return parts[1]


def _owner(path: Path) -> str | None:
    """The service whose distribution holds ``path``; None for a library."""
    relative = path.relative_to(ROOT)
    return relative.parts[1] if relative.parts[0] == "services" else None


def test_the_finder_sees_lazy_and_aliased_imports() -> None:
    source = (
        "from quire.audit.v1 import audit_service_pb2\n"
        "def f():\n"
        "    from quire.audit import tables as audit_tables\n"
        "    import quire.signer.tables\n"
    )
    found = imported(source)
    assert {"quire.audit.tables", "quire.signer.tables"} <= found
    assert {_service_of(name) for name in found} == {None, "audit", "signer"}


def test_no_tables_are_imported_outside_their_service() -> None:
    sources = [path for top in ("libs", "services") for path in _sources(ROOT / top)]
    assert len(sources) > 200, "the sources were found"
    crossing = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in sources
        for name in imported(path.read_text())
        if name.endswith(".tables") and _service_of(name) not in (None, _owner(path))
    }
    assert crossing == set(), "ask the service over its API (quire.export.v1)"


@pytest.mark.parametrize("library", ["ops", "core", "evidence"])
def test_the_libraries_import_no_service_code(library: str) -> None:
    """Only the generated APIs: the operator tools, and what every service
    shares, install and import without any service."""
    found = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in _sources(ROOT / "libs" / library)
        for name in imported(path.read_text())
        if _service_of(name) is not None
    }
    assert found == set()
