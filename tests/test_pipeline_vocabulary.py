"""One pipeline vocabulary: the services, the stages, the states and the
validator's verdicts are declared in ``quire.pipeline`` and derived
everywhere else, never listed again."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from quire.pipeline import (
    SERVICES,
    STAGE_NAMES,
    STAGES,
    TEMP_SPACE_SERVICES,
    WORKER_SERVICES,
    State,
    Verdict,
    steps_of,
)

ROOT = Path(__file__).resolve().parents[1]
DECLARED = ROOT / "libs" / "core" / "quire" / "pipeline.py"


def test_the_services_and_stages_are_derived_from_the_stages() -> None:
    assert SERVICES == ("admission", "validator", "assembler", "signer", "audit")
    assert WORKER_SERVICES == ("validator", "assembler", "signer")
    assert set(TEMP_SPACE_SERVICES) < set(WORKER_SERVICES)
    assert STAGE_NAMES == tuple(s.name for s in STAGES)


@pytest.mark.parametrize("verdict", list(Verdict))
def test_each_verdict_names_the_state_it_leads_to(verdict: Verdict) -> None:
    assert verdict.state in steps_of("validator")
    assert verdict.state in State


def _restatements(path: Path, words: frozenset[str]) -> list[int]:
    """Lines of literal tuples, lists or sets of three or more of ``words``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Tuple | ast.List | ast.Set) and len(node.elts) >= 3:
            values = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if len(values) == len(node.elts) and set(values) <= words:
                found.append(node.lineno)
    return found


@pytest.mark.parametrize(
    "words",
    [
        frozenset(SERVICES),
        frozenset(STAGE_NAMES),
        frozenset(State),
        frozenset(Verdict),
    ],
    ids=["services", "stages", "states", "verdicts"],
)
def test_no_module_lists_them_again(words: frozenset[str]) -> None:
    sources = [
        path
        for top in ("libs", "services")
        for path in (ROOT / top).rglob("*.py")
        if path != DECLARED
        and "versions" not in path.parts
        and "build" not in path.parts  # setuptools' copies, made by the distributions test
        and not path.name.endswith(("_pb2.py", "_pb2_grpc.py"))
    ]
    found = {str(p.relative_to(ROOT)): lines for p in sources if (lines := _restatements(p, words))}
    assert found == {}, "derive them from quire.pipeline"
