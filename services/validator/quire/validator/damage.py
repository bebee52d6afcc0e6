"""qpdf's warnings as stable damage codes, and which damage a repair may fix.

qpdf reports what it tolerated as free text naming the file, the object and
the offset. Nothing of that text leaves the sandbox: each warning becomes
one stable code. The list is an allow-list: a code in ``REPAIRABLE`` is
damage every viewer recovers from the same way (an xref off by whitespace, a
wrong ``/Size``, a stream ``/Length`` to recount, a page attribute to
default). A warning that says qpdf dropped or guessed content (``treating as
null``, ``ignoring``), a key given twice with different values, or anything
not on the list refuses the file: two viewers could show it differently, and
a signed contract must read the same everywhere.
"""

from __future__ import annotations

import re

__all__ = ["REPAIRABLE", "TOLERATED", "classify", "codes_of", "refusal_of"]

_PATTERNS: tuple[tuple[str, str], ...] = (
    # Cross-reference damage: the table is rebuilt by scanning the objects.
    (r"xref entry for the xref stream itself is missing", "XREF_STREAM_SELF_ENTRY_MISSING"),
    (r"extraneous whitespace seen before xref", "XREF_OFFSET_WHITESPACE"),
    (r"xref not found", "XREF_RECONSTRUCTED"),
    (r"file is damaged", "XREF_RECONSTRUCTED"),
    (r"reconstruct cross-reference table", "XREF_RECONSTRUCTED"),
    (r"can't find startxref", "XREF_RECONSTRUCTED"),
    (r"invalid xref (table )?entry", "XREF_ENTRY_INVALID"),
    (r"is not one plus the highest object number", "TRAILER_SIZE_WRONG"),
    (r"object has offset 0", "OBJECT_OFFSET_ZERO"),
    (r"expected (\d+|n) (\d+|n) obj", "OBJECT_OFFSET_WRONG"),
    (r"expected endobj", "ENDOBJ_MISSING"),
    # Streams whose /Length is missing or wrong: recounted up to endstream.
    (r"stream length", "STREAM_LENGTH_RECOVERED"),
    (r"/Length key", "STREAM_LENGTH_RECOVERED"),
    (r"expected endstream", "STREAM_LENGTH_RECOVERED"),
    (r"stream keyword (not )?followed by", "STREAM_KEYWORD_SPACING"),
    # Page tree: attributes defaulted as the specification says, types fixed.
    (r"Resources is missing or invalid", "PAGE_RESOURCES_DEFAULTED"),
    (r"MediaBox is undefined", "PAGE_MEDIABOX_DEFAULTED"),
    (r"setting missing or invalid /Type entry", "TYPE_CORRECTED"),
    (r"/Type key should be /Pages? but is not", "TYPE_CORRECTED"),
    (r"appears more than once in the pages tree", "PAGE_LISTED_TWICE"),
    (r"is direct; converting to indirect", "PAGE_MADE_INDIRECT"),
    (r"can't find PDF header", "HEADER_OFFSET"),
    # Syntax every reader recovers from the same way; the second reader
    # (``faithfulness``) must still agree with the rewrite.
    (r"xref syntax invalid", "XREF_SYNTAX_INVALID"),
    (r"trailer dictionary lacks /Size", "TRAILER_SIZE_MISSING"),
    (r"not found in file after regenerating", "OBJECT_MISSING"),
    (r"name with stray #", "NAME_STRAY_HASH"),
    (r"in hexstring", "HEX_STRING_INVALID"),
    # Shapes refused for what they are, whatever a repair would do.
    (r"root of pages tree has no /Kids", "STRUCTURE_MISSING"),
    (r"Loop detected in /Pages", "PAGE_TREE_LOOP"),
    (r"invalid password|encryption (dictionary|filter)|/Encrypt", "ENCRYPTION_UNREADABLE"),
    # What a repair must not guess: refused.
    (r"duplicated key", "DUPLICATE_KEY"),
    (r"treating as null|using null|as null", "CONTENT_DROPPED"),
    (r"ignoring|too many errors", "CONTENT_DROPPED"),
    (r"unexpected EOF|parse error|unknown token|ended prematurely", "CONTENT_DROPPED"),
    # The trailer lost /Root (or is gone) and qpdf's scan found the catalog:
    # accepted only if the second reader agrees (``faithfulness``).
    (
        r"recovered trailer has no /Root|unable to find trailer dictionary while recovering",
        "ROOT_RECOVERED",
    ),
    (r"unable to find|no /Root|recovered trailer has no", "STRUCTURE_MISSING"),
)
_COMPILED = tuple((re.compile(pattern, re.IGNORECASE), code) for pattern, code in _PATTERNS)

UNRECOGNIZED = "UNRECOGNIZED_DAMAGE"
REPAIRABLE = frozenset(
    {
        "XREF_STREAM_SELF_ENTRY_MISSING",
        "XREF_OFFSET_WHITESPACE",
        "XREF_RECONSTRUCTED",
        "XREF_ENTRY_INVALID",
        "TRAILER_SIZE_WRONG",
        "OBJECT_OFFSET_ZERO",
        "OBJECT_OFFSET_WRONG",
        "ENDOBJ_MISSING",
        "STREAM_LENGTH_RECOVERED",
        "STREAM_KEYWORD_SPACING",
        "PAGE_RESOURCES_DEFAULTED",
        "PAGE_MEDIABOX_DEFAULTED",
        "TYPE_CORRECTED",
        "PAGE_LISTED_TWICE",
        "PAGE_MADE_INDIRECT",
        "HEADER_OFFSET",
        "XREF_SYNTAX_INVALID",
        "TRAILER_SIZE_MISSING",
        "OBJECT_MISSING",
        "HEX_STRING_INVALID",
        "ROOT_RECOVERED",
    }
)
"""Damage a repair fixes. Every other code refuses the file."""
TOLERATED = frozenset({"FLATE_CHECKSUM_WRONG"})
"""Damage qpdf does not warn about and the validator's own decoders tolerate
as every viewer does (``decoding``): recorded with a rewrite like a repair."""


def classify(message: str) -> str:
    """The stable code of one qpdf warning or error message."""
    for pattern, code in _COMPILED:
        if pattern.search(message):
            return code
    return UNRECOGNIZED


def codes_of(messages: list[str]) -> list[str]:
    """Distinct codes, in the order first seen."""
    return list(dict.fromkeys(classify(message) for message in messages))


def refusal_of(codes: list[str]) -> str:
    """The first code a repair may not fix ("" when all are repairable)."""
    return next((code for code in codes if code not in REPAIRABLE), "")
