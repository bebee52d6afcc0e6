"""Schema compatibility during a rollout (issue 20): migrations are
expand-and-contract, so version N and version N+1 of a service run against
one database while a rollout moves work from one to the other.

The stack test runs two builds of the validator on one SQLite database:

- **N** is a real older build, taken from git history: the validator as of
  the commit just before its newest migration was added (its tree's
  ``libs``, ``services`` and ``gen``, put first on ``PYTHONPATH`` so they
  shadow the working tree's editable installs). It creates the database at
  its own head revision and serves the baseline track.
- **N+1** is the working tree's validator at another build version, the
  candidate of a validate rollout. It starts on the same database while N
  keeps running, so it migrates the database to its head under N's feet.

Jobs split between the tracks; every one completes, the candidate-track
jobs validated by N+1 and the baseline ones by N (the audit ledger's
validator entries say which build), and both wrote their validations into
the shared, migrated database.

The static test keeps the rule for future releases: every migration's
``upgrade()`` only expands (new tables, nullable or defaulted columns,
indexes) unless it declares itself a contract step.
"""

from __future__ import annotations

import ast
import asyncio
import os
import re
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_faults_common import running_stack, submit_tracked_jobs, wait_all

from quire.client import TenantAdminClient
from quire.jobs import state_name
from quire.schema import chain_head
from quire.testing.quirecli import run_quire
from quire.testing.replicas import extra_process, wait_serving
from quire.tracks import BASELINE, CANDIDATE
from quire.type import queue_pb2

ROOT = Path(__file__).resolve().parent.parent
MIGRATIONS = "services/validator/quire/validator/migrations"
OLD_TREE = ("libs", "services", "gen")
OLD_PATHS = (
    "libs/core",
    "libs/ops",
    "libs/testing",
    "gen",
    *(f"services/{s}" for s in ("validator", "admission", "assembler", "signer", "audit")),
)
"""N's import roots, in front of the working tree's (editable installs are
plain path entries, so PYTHONPATH shadows them)."""
CANDIDATE_BUILD = "0.2.0"
SHARE = 3000
"""30 %: both tracks get a good part of a few jobs."""
JOBS = 20
ENV = {
    "QUIRE_QUEUE_AGE_BUDGET_SECONDS": "3600",
    "QUIRE_VALIDATOR_CONCURRENCY": "4",
}


# -- N, from git history ------------------------------------------------------


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"git {' '.join(args)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def _release_n() -> str:
    """The commit just before the validator's newest migration was added: N.

    Fails (never skips) without the history to find it, say in a shallow
    clone: the test then cannot show what it is for."""
    if _git("rev-parse", "--is-shallow-repository") == "true":
        pytest.fail(
            "this is a shallow clone: the schema-rollout test needs the git history "
            "of the validator's migrations to build version N (git fetch --unshallow)"
        )
    added = _git("log", "--diff-filter=A", "--format=%H", "--", MIGRATIONS).split()
    if not added:
        pytest.fail(f"no commit in this repository's history adds a file under {MIGRATIONS}")
    newest = added[0]
    parents = _git("log", "-1", "--format=%P", newest).split()
    if not parents:
        pytest.fail(f"{newest[:12]} (the newest migration's commit) has no parent: no version N")
    return parents[0]


def _extract(commit: str, directory: Path) -> Path:
    """``commit``'s libs, services and gen under ``directory``."""
    directory.mkdir(parents=True)
    archive = subprocess.Popen(
        ["git", "-C", str(ROOT), "archive", commit, *OLD_TREE], stdout=subprocess.PIPE
    )
    untar = subprocess.run(["tar", "-x", "-C", str(directory)], stdin=archive.stdout, check=False)
    assert archive.stdout is not None
    archive.stdout.close()
    assert archive.wait() == 0 and untar.returncode == 0, f"git archive {commit} failed"
    return directory


def _old_env(tree: Path) -> dict[str, str]:
    paths = [str(tree / p) for p in OLD_PATHS]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    return {"PYTHONPATH": os.pathsep.join(paths)}


def _declared_build_version(tree: Path) -> str:
    """The build version N's code writes on its ledger entries (its settings'
    ``BUILD_VERSION``; N reads no ``QUIRE_BUILD_VERSION`` if it predates it)."""
    found = re.search(
        r'^BUILD_VERSION = "([^"]+)"', (tree / "libs/core/quire/settings.py").read_text(), re.M
    )
    assert found, "N's settings declare no BUILD_VERSION"
    return found.group(1)


# -- processes -------------------------------------------------------------


# -- reads -----------------------------------------------------------------


def _revision(database: Path) -> list[str]:
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        return [row[0] for row in db.execute("SELECT version_num FROM alembic_version")]


def _validated_jobs(database: Path) -> set[str]:
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        return {
            f"jobs/{job.removeprefix('jobs/')}"
            for (job,) in db.execute("SELECT job FROM validations")
        }


def _handed_on(data_dir: Path, service: str) -> dict[str, queue_pb2.TransitionEvent]:
    """Each job's last ledger entry by ``service``, from the audit ledger."""
    path = data_dir / "audit" / "audit.db"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT event FROM ledger ORDER BY sequence").fetchall()
    made = {}
    for (raw,) in rows:
        event = queue_pb2.TransitionEvent.FromString(raw)
        if event.actor.service == service:
            made[event.job] = event
    return made


def _validations(data_dir: Path) -> dict[str, queue_pb2.TransitionEvent]:
    """Each job's validator hand-on (to ASSEMBLING), from the audit ledger."""
    return {
        job: event
        for job, event in _handed_on(data_dir, "validator").items()
        if state_name(event.to_state) == "ASSEMBLING"
    }


@pytest.mark.stack
async def test_validator_n_and_n_plus_1_share_one_database_through_a_migration(
    tmp_path: Path,
) -> None:
    commit = _release_n()
    old = _extract(commit, tmp_path / "release-n")
    old_env = _old_env(old)
    probe = subprocess.run(
        [sys.executable, "-c", "import quire.validator.main as m; print(m.__file__)"],
        env={**os.environ, **old_env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr
    assert Path(probe.stdout.strip()).is_relative_to(old), (
        f"N's validator is not imported from its own tree: {probe.stdout}"
    )
    n_head = chain_head(old / MIGRATIONS)
    head = chain_head(ROOT / MIGRATIONS)
    assert n_head and head and n_head != head, (n_head, head)
    n_build = _declared_build_version(old)
    assert n_build != CANDIDATE_BUILD

    shared = tmp_path / "shared" / "validator.db"
    shared.parent.mkdir()
    url = f"sqlite:///{shared}"
    async with running_stack(tmp_path / "stack", ENV) as running:
        stack = running.stack
        await asyncio.to_thread(stack.stop_service, "validator")  # N and N+1 take its place
        # N takes over the stopped validator's gRPC address too: admission
        # asks it for the published rulesets when a job is submitted.
        address = running.info.endpoints["validator"]
        async with extra_process(
            stack,
            "validator",
            "validator-n",
            {**old_env, "QUIRE_VALIDATOR_DATABASE_URL": url},
            address=address,
            drop=("QUIRE_BUILD_VERSION",),
        ) as release_n:
            assert _revision(shared) == [n_head], "N creates the database at its own head"
            token = running.info.operator_token()
            async with TenantAdminClient(running.info.endpoints["admission"], token) as admin:
                await admin.start_rollout(
                    stage="validate",
                    candidate_version=CANDIDATE_BUILD,
                    share_basis_points=SHARE,
                    concurrency_cap=4,
                )
            extra = {"QUIRE_BUILD_VERSION": CANDIDATE_BUILD}
            async with extra_process(
                stack,
                "validator",
                "validator-n1",
                {**extra, "QUIRE_VALIDATOR_DATABASE_URL": url},
                drop=("QUIRE_BUILD_VERSION",),
            ):
                assert _revision(shared) == [head], "N+1 migrates the shared database"
                assert release_n.poll() is None, "N keeps running through the migration"
                await wait_serving(stack, "validator-n1", CANDIDATE)

                tracks = await submit_tracked_jobs(running.client, tmp_path / "jobs", JOBS)
                jobs = await wait_all(running.client, list(tracks), timeout=180)
                states = Counter(state_name(j.state) for j in jobs.values())
                assert states == {"COMPLETED": JOBS}, states
                assert release_n.poll() is None, "N served to the end"

        candidates = {job for job, track in tracks.items() if track == CANDIDATE}
        baseline = {job for job, track in tracks.items() if track == BASELINE}
        assert candidates and baseline and candidates | baseline == set(tracks), tracks
        made = _validations(stack.data_dir)
        by_track = Counter((tracks[job], made[job].actor.build_version) for job in tracks)
        assert by_track == {
            (CANDIDATE, CANDIDATE_BUILD): len(candidates),
            (BASELINE, n_build): len(baseline),
        }, by_track
        # The track rides on the task: N+1 writes it on its entries; N, older
        # than tracks, writes none ("") but hands the task on with it intact,
        # so the next stage's entries still say baseline.
        assert {made[job].track for job in candidates} == {CANDIDATE}
        assert {made[job].track for job in baseline} <= {BASELINE, ""}
        assembled = _handed_on(stack.data_dir, "assembler")
        assert all(assembled[job].track == tracks[job] for job in tracks)
        instances = (
            {made[job].actor.instance for job in candidates},
            {made[job].actor.instance for job in baseline},
        )
        assert instances == ({"validator-n1"}, {"validator-n"}), instances
        # Both builds wrote their validations into the one, migrated database.
        assert _revision(shared) == [head]
        assert set(tracks) <= _validated_jobs(shared)
        # The ledger's invariants hold with entries from both builds.
        check = run_quire(stack.data_dir, "check")
        assert check.returncode == 0, check.stdout + check.stderr
        print(  # noqa: T201
            f"N = {commit[:12]} ({n_build}, {n_head}); N+1 = working tree "
            f"({CANDIDATE_BUILD}, {head}); {len(candidates)}/{JOBS} candidate jobs"
        )


# -- expand-only migrations ------------------------------------------------

CONTRACT_MARK = "contract_step"
"""A migration that removes or renames what the previous release reads says
so with a module-level ``contract_step: str = "<why it is safe now>"``; it
ships only once no running release reads the old shape."""

ALLOWED_CONTRACTIONS: dict[str, str] = {}
"""Existing migrations that contract without the mark, each with its reason.

Empty: every migration so far only expands. The baselines (0001) and the
later ones create tables (their NOT NULL columns are new tables', which no
older release reads or writes) and indexes, and add nullable columns (admission 0003 ``jobs.bundle_id``,
``jobs.batch``, ``tenants.scheduling_weight``; 0004 ``jobs.end_recorded_at``;
0005 ``jobs.deadline``; ``stage_leases.leased_at`` in the stage services)."""

_REMOVING = {"drop_table", "drop_column", "rename_table"}
_DESTRUCTIVE_SQL = re.compile(r"\b(DROP|RENAME)\b|\bALTER\s+TABLE\b.*\bALTER\b", re.I | re.S)


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _not_null_without_default(column: ast.expr) -> bool:
    if not isinstance(column, ast.Call):
        return False
    nullable = _keyword(column, "nullable")
    primary = _keyword(column, "primary_key")
    not_null = (isinstance(nullable, ast.Constant) and nullable.value is False) or (
        isinstance(primary, ast.Constant) and primary.value is True and nullable is None
    )
    return not_null and _keyword(column, "server_default") is None


def contractions(source: str) -> list[str]:
    """What ``upgrade()`` in a migration's ``source`` does that the previous
    release could not live with (empty when it only expands)."""
    tree = ast.parse(source)
    upgrade = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "upgrade"), None
    )
    if upgrade is None:
        return []
    found: list[tuple[int, str]] = []
    for node in ast.walk(upgrade):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name = node.func.attr
        if name in _REMOVING:
            found.append((node.lineno, f"{name}"))
        elif name == "alter_column" and _keyword(node, "new_column_name") is not None:
            found.append((node.lineno, "alter_column(new_column_name=...)"))
        elif name == "alter_column":
            nullable = _keyword(node, "nullable")
            if isinstance(nullable, ast.Constant) and nullable.value is False:
                found.append((node.lineno, "alter_column(nullable=False)"))
        elif name == "add_column" and any(_not_null_without_default(a) for a in node.args):
            found.append((node.lineno, "add_column of a NOT NULL column without a default"))
        elif name == "execute":
            text = " ".join(
                a.value
                for a in ast.walk(node)
                if isinstance(a, ast.Constant) and isinstance(a.value, str)
            )
            if _DESTRUCTIVE_SQL.search(text):
                found.append((node.lineno, f"execute({text[:60]!r})"))
    return [f"line {line}: {what}" for line, what in sorted(found)]


def _declares_contract(source: str) -> bool:
    tree = ast.parse(source)
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == CONTRACT_MARK:
            return True
    return False


def _migrations() -> Iterator[Path]:
    yield from sorted(ROOT.glob("services/*/quire/*/migrations/*.py"))


def test_every_migration_only_expands_unless_it_declares_a_contract_step() -> None:
    files = list(_migrations())
    assert len(files) >= 5, "the migrations were not found"
    offending = {}
    for path in files:
        source = path.read_text()
        name = str(path.relative_to(ROOT))
        if _declares_contract(source) or name in ALLOWED_CONTRACTIONS:
            continue
        if found := contractions(source):
            offending[name] = found
    assert not offending, (
        "these migrations contract the schema while the previous release may still run "
        f"against it (expand now, contract in a later release marked {CONTRACT_MARK}): "
        f"{offending}"
    )
    stale = set(ALLOWED_CONTRACTIONS) - {str(p.relative_to(ROOT)) for p in files}
    assert not stale, f"allowlisted migrations that no longer exist: {stale}"


def test_the_expand_only_check_sees_each_contraction() -> None:
    source = """
import sqlalchemy as sa
from alembic import op

def upgrade() -> None:
    op.create_table("fresh", sa.Column("id", sa.String(8), nullable=False))
    op.add_column("a", sa.Column("ok", sa.Integer(), nullable=True))
    op.add_column("a", sa.Column("ok2", sa.Integer(), nullable=False, server_default="0"))
    op.drop_table("old")
    with op.batch_alter_table("a") as batch_op:
        batch_op.drop_column("gone")
        batch_op.alter_column("x", new_column_name="y")
        batch_op.alter_column("z", nullable=False)
        batch_op.add_column(sa.Column("strict", sa.Integer(), nullable=False))
    op.rename_table("b", "c")
    op.execute("ALTER TABLE d DROP COLUMN e")

def downgrade() -> None:
    op.drop_table("fresh")
"""
    found = contractions(source)
    assert [line.split(": ", 1)[1].split("(")[0] for line in found] == [
        "drop_table",
        "drop_column",
        "alter_column",
        "alter_column",
        "add_column of a NOT NULL column without a default",
        "rename_table",
        "execute",
    ], found
    assert not _declares_contract(source)
    assert _declares_contract(f'{CONTRACT_MARK}: str = "N no longer reads it"\n{source}')
