"""What a sandbox worker's forkserver loads: the PDF libraries and the code
that runs on documents, never the service's database or settings machinery.

Every stage starts one forkserver per sandbox pool, a fresh interpreter that
imports its modules once; the workers fork from it. Importing SQLAlchemy and
the settings there cost each forkserver about half a second of CPU at every
start and each worker the memory of modules it never runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from quire.assembler.main import SANDBOX_MODULES as MERGING
from quire.signer.main import SANDBOX_MODULES as SIGNING
from quire.validator.main import PDF_INSPECTION_MODULES as INSPECTING

NEVER = ("sqlalchemy", "pydantic_settings", "quire.settings", "quire.database", "grpc")


@pytest.mark.parametrize(
    "modules", [INSPECTING, MERGING, SIGNING], ids=["validator", "assembler", "signer"]
)
def test_a_sandbox_forkserver_loads_no_database_or_settings(modules: tuple[str, ...]) -> None:
    script = (
        "import importlib, json, sys\n"
        f"for name in {['quire.sandbox', *modules]!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    loaded = set(json.loads(subprocess.check_output([sys.executable, "-c", script], text=True)))
    assert set(modules) <= loaded
    assert not [name for name in NEVER if name in loaded], sorted(loaded & set(NEVER))
