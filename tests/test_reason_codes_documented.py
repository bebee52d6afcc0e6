"""Every reason code says what it means: each ``ReasonCode`` member has an
attribute docstring, read as ``tools/docgen.py`` reads it for the reason-codes
reference page (where a member without one shows an empty meaning)."""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path
from types import ModuleType

from quire.reasons import ReasonCode

ROOT = Path(__file__).resolve().parents[1]
REASONS = ROOT / "libs" / "core" / "quire" / "reasons.py"


def _docgen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docgen", ROOT / "tools" / "docgen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _notes(path: Path, class_name: str) -> list[tuple[str, str, str]]:
    """(member, group, docstring) of each member, as the reference page reads them."""
    reader = _docgen()._member_notes  # noqa: SLF001 — the reader the page is made with
    return list(reader(path, class_name))


def undocumented(path: Path, class_name: str) -> list[str]:
    """The members of ``class_name`` in ``path`` with no docstring under them."""
    return [name for name, _group, note in _notes(path, class_name) if not note.strip()]


def test_every_reason_code_has_a_docstring() -> None:
    names = [name for name, _group, _note in _notes(REASONS, "ReasonCode")]
    assert names == [code.name for code in ReasonCode]  # the reader sees every member
    assert undocumented(REASONS, "ReasonCode") == [], (
        "write a docstring under each of these members of ReasonCode"
    )


def test_a_member_without_a_docstring_is_named(tmp_path: Path) -> None:
    source = tmp_path / "codes.py"
    source.write_text(
        textwrap.dedent(
            '''
            from enum import StrEnum


            class Codes(StrEnum):
                # First group.
                SAID = "SAID"
                """Documented."""
                UNSAID = "UNSAID"
                # Second group.
                BLANK = "BLANK"
                """   """
                LAST = "LAST"
            '''
        )
    )
    assert undocumented(source, "Codes") == ["UNSAID", "BLANK", "LAST"]
    documented = source.read_text().replace(
        'UNSAID = "UNSAID"\n', 'UNSAID = "UNSAID"\n    """Now said."""\n'
    )
    source.write_text(documented.replace('"""   """', '"""Said."""') + '    """Said too."""\n')
    assert undocumented(source, "Codes") == []
