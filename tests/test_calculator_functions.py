"""PostScript calculator functions past a bound are refused before a viewer
runs them (issue 36): nesting beyond 16 blocks, or a program that can push
more than the specification's 100 operands; ordinary tint transforms pass."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from quire.testing.hostile import _one_page, raw_pdf
from quire.validator.calculator import unbounded_calculator
from quire.validator.inspection import inspect_source

ORDINARY = [
    b"{ 360 mul sin 2 div exch 360 mul sin 2 div add }",
    b"{ dup 0.5 mul exch 1 exch sub 3 1 roll }",
    b"{ 0 index 1 index 2 copy pop pop }",
    b"{ dup 0.5 gt { 1 } { 0 } ifelse }",
]


@pytest.mark.parametrize("program", ORDINARY)
def test_ordinary_programs_pass(program: bytes) -> None:
    assert not unbounded_calculator(program)


def test_too_many_pushes_nested_blocks_or_a_computed_copy_are_refused() -> None:
    assert unbounded_calculator(b"{ " + b"1 " * 101 + b"}")
    assert unbounded_calculator(b"{" * 17 + b"1" + b"}" * 17)
    assert unbounded_calculator(b"{ 2 3 add copy }"), "copy's reach is a computed value"
    assert not unbounded_calculator(b"{" * 16 + b"1" + b"}" * 16)
    assert unbounded_calculator(b"{ 0 0 " + b"0 exch " * 500 + b"}"), "exch pops nothing"
    assert unbounded_calculator(
        b"{ " + b"0 " * 90 + b"false { " + b"pop " * 90 + b"} if " + b"0 " * 90 + b"}"
    ), "a pop inside a block that may not run frees nothing"
    assert unbounded_calculator(b"{ " + b"1 " * 60 + b"}", inputs=50), "inputs start on the stack"


def _shaded(path: Path, program: bytes) -> Path:
    objects = _one_page(b"/Sh1 sh")
    objects[2] = objects[2].replace(b"/F1 5 0 R >>", b"/F1 5 0 R >> /Shading << /Sh1 6 0 R >>")
    objects.append(
        b"<< /ShadingType 2 /ColorSpace /DeviceGray /Coords [0 0 100 0] /Function 7 0 R >>"
    )
    objects.append(
        b"<< /FunctionType 4 /Domain [0 1] /Range [0 1] /Length %d >>\nstream\n" % len(program)
        + program
        + b"\nendstream"
    )
    return raw_pdf(path, objects)


@pytest.mark.parametrize(
    ("program", "refused"),
    [(b"{ dup 0.5 mul exch pop }", False), (b"{ " + b"1 " * 500 + b"}", True)],
)
def test_the_validator_refuses_a_calculator_that_exhausts_the_stack(
    tmp_path: Path, program: bytes, refused: bool
) -> None:
    path = _shaded(tmp_path / "shaded.pdf", program)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    finding = inspect_source(str(path), digest, "application/pdf", None, str(tmp_path / "clean"))
    expected = ("MALFORMED_PDF", "STRUCTURE_TOO_DEEP") if refused else ("", "")
    assert (finding.reason, finding.detail) == expected
