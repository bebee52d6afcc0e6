"""The options of ``quire rollout start|status [--shadow N]|promote|rollback``, kept apart
from the commands so that building the parser imports none of their
dependencies."""

from __future__ import annotations

import argparse

from quire.pipeline import QUEUED_STAGE_NAMES

__all__ = ["add_rollout_arguments", "share_basis_points", "shadow_count"]

MAX_SHADOW = 200
"""The most completed jobs audit names per track (CompareTracks' sample)."""


def shadow_count(text: str) -> int:
    """``--shadow N``: 0 to 200 jobs."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of jobs: {text!r}") from None
    if not 0 <= count <= MAX_SHADOW:
        raise argparse.ArgumentTypeError(f"0 to {MAX_SHADOW} jobs")
    return count


def share_basis_points(text: str) -> int:
    """``10%``, ``2.5%`` or ``10`` (a percentage) → basis points, 0 to 10,000."""
    try:
        percent = float(text.strip().removesuffix("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a share: {text!r} (e.g. 10% or 2.5%)") from None
    if not 0 <= percent <= 100:
        raise argparse.ArgumentTypeError("a share is 0% to 100%")
    basis = round(percent * 100)
    if abs(basis - percent * 100) > 1e-6:
        raise argparse.ArgumentTypeError("a share has at most two decimals (basis points)")
    return basis


def add_rollout_arguments(
    rollout: argparse.ArgumentParser,
    common: argparse.ArgumentParser,
    once: argparse.ArgumentParser,
) -> None:
    """``quire rollout …``: operators' rollouts of a stage's candidate."""
    actions = rollout.add_subparsers(dest="action", required=True, help="what to do")
    start = actions.add_parser(
        "start",
        parents=[common, once],
        help="open a canary: pin a share of new jobs to the candidate track",
    )
    start.add_argument(
        "--stage",
        required=True,
        choices=QUEUED_STAGE_NAMES,
        help="the stage whose candidate this is",
    )
    start.add_argument(
        "--version",
        dest="candidate_version",
        default="",
        help="the candidate's deployable worker version (QUIRE_BUILD_VERSION)",
    )
    start.add_argument(
        "--ruleset",
        dest="candidate_ruleset",
        default="",
        help="the candidate's ruleset, name@version (validate only)",
    )
    start.add_argument(
        "--share",
        type=share_basis_points,
        required=True,
        help="the share of new jobs pinned to the candidate, e.g. 10%% or 2.5%%",
    )
    start.add_argument(
        "--tenant",
        dest="tenants",
        action="append",
        default=[],
        help="only this tenant's jobs (tenants/ID or the ID); repeat for several (default: all)",
    )
    start.add_argument(
        "--cap",
        type=int,
        required=True,
        help="the candidate's concurrency cap: its most deliveries in flight at once",
    )
    status = actions.add_parser(
        "status",
        parents=[common],
        help="one rollout's record, or every rollout's, and its candidate vs baseline",
    )
    status.add_argument(
        "rollout",
        nargs="?",
        default=None,
        help="rollouts/ID or the ID (default: all, newest first; the open ones compared)",
    )
    status.add_argument(
        "--shadow",
        type=shadow_count,
        default=0,
        metavar="N",
        help=(
            "also run the candidate ruleset over up to N (at most 200) of the baseline's"
            " completed jobs and compare the decisions with the recorded ones"
            " (records nothing; default 0: no shadow evaluation)"
        ),
    )
    for action, what in (
        ("promote", "the candidate becomes the baseline (share 100%%)"),
        ("rollback", "no new job is pinned to the candidate (share 0); nothing is deleted"),
    ):
        actions.add_parser(action, parents=[common, once], help=what).add_argument(
            "rollout", help="rollouts/ID or the ID"
        )
