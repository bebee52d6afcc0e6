"""``quire evidence export|verify``: the options of a job's evidence commands.

``quire evidence export JOB`` writes the job's evidence file: through audit
with an operator token (any tenant's job), through admission with a tenant's
own token (its own jobs only). ``quire evidence verify FILE`` checks one
offline. The older ``quire evidence JOB`` still exports: a job id is never
``export`` or ``verify`` (ids are hex), so the two cannot be confused.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

__all__ = ["ACTIONS", "add_evidence_arguments", "export_by_default"]

ACTIONS = ("export", "verify")
_TOP_LEVEL_VALUED = ("--data-dir",)
"""The top-level options that take a value (``quire --data-dir D evidence ...``)."""
_EXPORT_VALUED = ("--data-dir", "-o", "--output", "--earlier")
"""The options of the old ``quire evidence JOB`` form that take a value."""
_HELP = ("-h", "--help")


def export_by_default(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``quire evidence JOB ...`` spelled ``quire evidence export JOB ...``."""
    words = list(argv)
    at = _first_word(words, 0, _TOP_LEVEL_VALUED)
    if at is None or words[at] != "evidence":
        return words
    following = _first_word(words, at + 1, _EXPORT_VALUED)
    if following is None or words[following] in ACTIONS:
        return words
    if any(word in _HELP for word in words[at + 1 : following]):
        return words
    return [*words[: at + 1], "export", *words[at + 1 :]]


def _first_word(words: list[str], start: int, valued: tuple[str, ...]) -> int | None:
    """Where the first word from ``start`` on is that is no option (nor the
    value of one of the ``valued`` options)."""
    skip = False
    for index in range(start, len(words)):
        word = words[index]
        if skip:
            skip = False
        elif word in valued:
            skip = True
        elif not word.startswith("-"):
            return index
    return None


def add_evidence_arguments(
    evidence: argparse.ArgumentParser, common: argparse.ArgumentParser
) -> None:
    actions = evidence.add_subparsers(dest="action", required=True, help="what to do")
    export = actions.add_parser(
        "export",
        parents=[common],
        help="write a job's evidence file (also `quire evidence JOB`)",
        description="Write a job's evidence file. With an operator token (QUIRE_OPERATOR_TOKEN,"
        " or the stack's) it is asked of audit and any tenant's job is served; with only a"
        " tenant's token (QUIRE_TOKEN) it is asked of admission, which serves that tenant's"
        " own jobs. Verify the file with `quire evidence verify`.",
    )
    export.add_argument("job", help="the job id or jobs/ID")
    export.add_argument(
        "-o", "--output", default="", help="where to write it (default: JOB.evidence.json)"
    )
    export.add_argument(
        "--earlier",
        default="",
        help="an evidence file (or checkpoint note) of the same tenant seen earlier:"
        " the new file also proves that it extends that checkpoint",
    )
    export.add_argument(
        "--as-tenant",
        action="store_true",
        help="ask admission with the tenant's token even when an operator token is known",
    )
    verify = actions.add_parser(
        "verify",
        parents=[common],
        help="check an evidence file offline",
        description="Check an evidence file offline against keys taken from outside it:"
        " audit's checkpoint key (`quire audit key`) and the witness's verifier key"
        " (`quire witness key`), as your operator publishes them.",
    )
    verify.add_argument("file", help="the evidence file")
    verify.add_argument(
        "--key-sha256", default="", help="the pin of audit's checkpoint key (`quire audit key`)"
    )
    verify.add_argument(
        "--key-file", default="", help="audit's checkpoint public key, PEM (`quire audit key`)"
    )
    verify.add_argument("--tenant", default="", help="the tenant the evidence must be from")
    verify.add_argument(
        "--witness-key", default="", help="the witness's verifier key (`quire witness key`)"
    )
    verify.add_argument(
        "--witness-key-file", default="", help="a file holding the witness's verifier key"
    )
    verify.add_argument(
        "--earlier",
        default="",
        help="an evidence file (or checkpoint note) of the same tenant seen earlier,"
        " which this one must extend",
    )
