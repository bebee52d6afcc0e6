"""What an encryption dictionary that qpdf will not open means, in the sandbox.

Only the document's own encryption makes a source ``ENCRYPTED_PDF``: its
pages cannot be read without a password Quire is never given. Two other
shapes reach the same qpdf refusal and mean something else:

- **an encrypted attachment**: the dictionary leaves strings and streams in
  the clear (``/StmF`` and ``/StrF`` are ``/Identity``) and names a filter
  only for embedded files (``/EFF``). Every viewer shows the pages without a
  password. It is an attachment, under the ruleset's attachment policy:
  ``ACTIVE_CONTENT`` (``ENCRYPTED_ATTACHMENT``) where embedded files are
  refused; where they are allowed, the attachment still cannot be checked,
  and the source is refused as ``ENCRYPTED_PDF`` with that sub-code.
- **a malformed dictionary** (``/Encrypt`` not a dictionary, ``/P`` not a
  number, a key of the wrong type): no reader can derive a key from it, and
  readers differ on whether the file is encrypted at all. That is damage,
  ``MALFORMED_PDF`` ``ENCRYPTION_MALFORMED``, never a guess either way.
"""

from __future__ import annotations

import re

from quire.reasons import ReasonCode

__all__ = ["ENCRYPTED_ATTACHMENT", "ENCRYPTION_MALFORMED", "encryption_refusal"]

ENCRYPTED_ATTACHMENT = "ENCRYPTED_ATTACHMENT"
ENCRYPTION_MALFORMED = "ENCRYPTION_MALFORMED"
_MALFORMED = re.compile(
    r"not a dictionary|missing or the wrong type|is not a (number|string|name)|wrong type",
    re.IGNORECASE,
)
_CLEAR = "/Identity"


def _attachments_only(path: str) -> bool:
    """Whether the trailer's encryption dictionary encrypts embedded files only."""
    import pypdf  # lazy: only sandbox workers load it

    try:
        reader = pypdf.PdfReader(path, strict=False)
        encrypt = reader.trailer.get("/Encrypt")
        encrypt = encrypt.get_object() if encrypt is not None else None
        if not isinstance(encrypt, pypdf.generic.DictionaryObject):
            return False
        clear = all(str(encrypt.get(key, _CLEAR)) == _CLEAR for key in ("/StmF", "/StrF"))
        return clear and str(encrypt.get("/EFF", _CLEAR)) != _CLEAR
    except Exception:  # noqa: BLE001 — any failure to read it leaves the plain verdict
        return False


def encryption_refusal(path: str, message: str, allow_attachments: bool) -> tuple[str, str]:
    """(reason, sub-code) for a source qpdf refused over its encryption;
    ``message`` is qpdf's (never recorded)."""
    if _MALFORMED.search(message):
        return ReasonCode.MALFORMED_PDF, ENCRYPTION_MALFORMED
    if _attachments_only(path):
        if allow_attachments:
            return ReasonCode.ENCRYPTED_PDF, ENCRYPTED_ATTACHMENT
        return ReasonCode.ACTIVE_CONTENT, ENCRYPTED_ATTACHMENT
    return ReasonCode.ENCRYPTED_PDF, ""
