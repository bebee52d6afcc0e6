"""The ``quire`` command's exit codes: defined once, documented in ``--help``.

Scripts branch on these, so each outcome a caller handles differently has
its own code, and a number never changes meaning.
"""

from __future__ import annotations

import textwrap
from enum import IntEnum

__all__ = ["ExitCode", "epilog"]


class ExitCode(IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    REJECTED = 3
    TIMEOUT = 4
    REFUSED = 5
    UNREACHABLE = 6
    DATA_DIR_IN_USE = 7
    INTERRUPTED = 130

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS = {
    ExitCode.OK: "done: the job completed, the file or ledger verified",
    ExitCode.FAILED: "the answer is no: a job ended FAILED or CANCELLED or is parked "
    "for review, a check did not pass, a file does not verify or is not a readable "
    "signed PDF (quire verify), two jobs differ (quire diff); or an error not listed here",
    ExitCode.USAGE: "bad arguments, a missing or unreadable file, a malformed manifest",
    ExitCode.REJECTED: "the job ended REJECTED (its documents or manifest were refused)",
    ExitCode.TIMEOUT: "gave up waiting (--timeout, or a call's deadline passed)",
    ExitCode.REFUSED: "the stack refused the request, or holds no such thing: a gRPC "
    "status with a Quire reason code, printed (NOT_FOUND, TENANT_QUOTA_EXCEEDED, ...)",
    ExitCode.UNREACHABLE: "no stack to talk to: nothing answers (UNAVAILABLE), or no "
    "stack.json or address for this data directory",
    ExitCode.DATA_DIR_IN_USE: "quire up: another stack is running on this data directory",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}


def epilog() -> str:
    """The exit-code table for ``quire --help`` (shown verbatim, wrapped to 79 columns)."""
    rows = []
    for code in ExitCode:
        head = f"  {code.value:>3}  {code.name:<16} "
        rows.append(
            textwrap.fill(
                code.meaning, width=79, initial_indent=head, subsequent_indent=" " * len(head)
            )
        )
    return "exit codes:\n" + "\n".join(rows)
