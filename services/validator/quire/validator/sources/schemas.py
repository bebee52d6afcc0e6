"""The structures a source system's JSON sources must have, versioned and
shipped with the validator: ``schemas/<name>@<version>.json``, each a JSON
Schema (draft 2020-12). A registration names one as ``name@version``
(``carrier-events@1``); a version never changes once shipped — a new
structure is a new version.

A fetched JSON source whose system names a schema is checked against it
after it is pinned (the ledger records what was fetched): one that does not
match is REJECTED with ``SOURCE_SCHEMA_INVALID``. A schema this validator
does not ship is checked before anything is fetched, and ends the job
FAILED (``SOURCE_SCHEMA_INVALID``): the job is not at fault but the
registration and this build disagree, so it is dead-lettered, and can be
retried once a validator that ships the schema runs.

What a mismatch reports is where in the *schema* the first error is
(``properties/tax/properties/jurisdiction/pattern``), never a value or a
key of the document.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

__all__ = ["SCHEMA_DIRECTORY", "shipped_schemas", "is_shipped", "schema_error"]

SCHEMA_DIRECTORY = Path(__file__).with_name("schemas")


@lru_cache(maxsize=1)
def _validators() -> dict[str, Draft202012Validator]:
    validators = {}
    for path in sorted(SCHEMA_DIRECTORY.glob("*@*.json")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        Draft202012Validator.check_schema(schema)
        validators[path.stem] = Draft202012Validator(schema)
    return validators


def shipped_schemas() -> list[str]:
    """Every ``name@version`` this validator checks sources against."""
    return sorted(_validators())


def is_shipped(schema: str) -> bool:
    return schema in _validators()


def schema_error(schema: str, document: Any, *, parsed: bool = True) -> str:
    """Where ``document`` first fails ``schema`` (a path in the schema), or
    "" when it matches. ``parsed`` False: the body is not JSON at all."""
    if not parsed:
        return "(not JSON)"
    validator = _validators()[schema]
    errors = sorted(
        validator.iter_errors(document),
        key=lambda e: [str(p) for p in e.absolute_schema_path],
    )
    if not errors:
        return ""
    return "/".join(str(p) for p in errors[0].absolute_schema_path) or "(root)"
