"""``quire batch submit|status|cancel|jobs``: what the CLI reads from disk, what
it sends (each distinct source once, then one SubmitBatch), and, on the real
stack, a small batch followed from submission to its last job."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from quire.admission.v1 import admission_service_pb2 as pb
from quire.admission.v1 import batch_pb2
from quire.cli.batches import batch_exit, batch_resource
from quire.cli.batchfiles import BatchItem, read_batch
from quire.cli.batchsend import batch_manifest_json, send_batch
from quire.cli.errors import CliError
from quire.cli.exitcodes import ExitCode
from quire.cli.parser import build_parser
from quire.cli.progress import batch_progress, progress_wanted
from quire.client import AdmissionClient
from quire.jobs import state_value
from quire.stack.supervisor import StackInfo
from quire.testing.pdfs import write_text_pdf as _write_text_pdf
from quire.testing.quirecli import run_quire

DIGEST = "ab" * 32


def write_text_pdf(path: Path, page_texts: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return _write_text_pdf(path, page_texts)


def _manifest(path: Path, document: Any) -> Path:
    path.write_text(json.dumps(document))
    return path


def _folder_of_packets(root: Path) -> Path:
    folder = root / "portfolio"
    write_text_pdf(folder / "b-lease" / "z-terms.pdf", ["terms"])
    write_text_pdf(folder / "b-lease" / "a-cover.pdf", ["cover"])
    write_text_pdf(folder / "a-lease" / "one.pdf", ["one"])
    write_text_pdf(folder / "a-lease" / "two.pdf", ["two"])
    _manifest(
        folder / "a-lease" / "manifest.json",
        {
            "documents": [
                {"document_id": "second", "file": "two.pdf", "position": 0},
                {"document_id": "first", "file": "one.pdf", "position": 1},
            ],
            "ruleset": "strict",
        },
    )
    (folder / ".hidden").mkdir()
    (folder / "notes.txt").write_text("not a packet")
    return folder


def test_a_folder_holds_one_packet_per_subfolder_in_sorted_order(tmp_path: Path) -> None:
    folder = _folder_of_packets(tmp_path)
    packets = read_batch(folder)
    assert [p.bundle_id for p in packets] == ["a-lease", "b-lease"]
    by_manifest, by_files = packets
    assert [(i.position, i.document_id) for i in by_manifest.items] == [(0, "second"), (1, "first")]
    assert by_manifest.ruleset == "strict"
    assert [(i.position, i.document_id) for i in by_files.items] == [(0, "a-cover"), (1, "z-terms")]
    assert by_files.items[0].path == (folder / "b-lease" / "a-cover.pdf").resolve()


def test_an_empty_packet_folder_or_folder_is_refused_before_anything_is_sent(
    tmp_path: Path,
) -> None:
    (tmp_path / "empty" / "p1").mkdir(parents=True)
    with pytest.raises(CliError, match="packet p1: no PDF files") as caught:
        read_batch(tmp_path / "empty")
    assert caught.value.code == ExitCode.USAGE
    (tmp_path / "none").mkdir()
    with pytest.raises(CliError, match="no packet folders"):
        read_batch(tmp_path / "none")
    with pytest.raises(CliError, match="no such folder or manifest"):
        read_batch(tmp_path / "absent")


def test_manifest_items_name_files_beside_it_or_uploaded_digests(tmp_path: Path) -> None:
    manifest = _manifest(
        tmp_path / "batch.json",
        {
            "packets": [
                {
                    "bundle_id": "lease-7",
                    "items": [
                        {"document_id": "cover", "file": "docs/cover.pdf"},
                        {"document_id": "terms", "sha256": DIGEST.upper(), "position": 5},
                    ],
                    "render_profile": "archival",
                },
                {"items": [{"document_id": "only", "sha256": DIGEST}]},
            ]
        },
    )
    first, second = read_batch(manifest)
    assert first.bundle_id == "lease-7" and first.render_profile == "archival"
    assert first.items == (
        BatchItem(0, "cover", path=(tmp_path / "docs" / "cover.pdf").resolve()),
        BatchItem(5, "terms", sha256=DIGEST),
    )
    assert second.bundle_id == "" and second.items == (BatchItem(0, "only", sha256=DIGEST),)


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ({"documents": []}, "not a batch manifest"),
        ({"packets": []}, "not a batch manifest"),
        ({"packets": [{"items": []}]}, "packets[0].items: a packet needs at least one item"),
        ({"packets": [{"bundle_id": "x"}]}, "packets[0]: want"),
        (
            {"packets": [{"items": [{"document_id": "a", "sha256": DIGEST, "file": "a.pdf"}]}]},
            "packets[0].items[0]: give either file or sha256",
        ),
        (
            {
                "packets": [
                    {"items": [{"document_id": "a", "sha256": DIGEST}, {"document_id": "b"}]}
                ]
            },
            "packets[0].items[1]: give either file or sha256",
        ),
        (
            {"packets": [{"items": [{"document_id": "a", "sha256": "abc"}]}]},
            "packets[0].items[0].sha256: not a sha256",
        ),
        (
            {"packets": [{"items": [{"document_id": "a", "sha256": DIGEST, "position": "x"}]}]},
            "packets[0].items[0].position: not a whole number",
        ),
        ({"packets": [{"items": [{"file": "a.pdf"}]}]}, "packets[0].items[0]: want"),
    ],
)
def test_a_malformed_manifest_names_the_item_at_fault(
    tmp_path: Path, document: Any, said: str
) -> None:
    with pytest.raises(CliError) as caught:
        read_batch(_manifest(tmp_path / "batch.json", document))
    assert said in str(caught.value) and caught.value.code == ExitCode.USAGE


def test_a_manifest_that_is_not_json_says_where(tmp_path: Path) -> None:
    (tmp_path / "batch.json").write_text('{"packets": [\n')
    with pytest.raises(CliError, match="is not JSON: line 2"):
        read_batch(tmp_path / "batch.json")


class RecordingAdmission:
    """Stands in for admission in a unit test of what the CLI sends."""

    def __init__(self) -> None:
        self.uploaded: list[str] = []
        self.manifests: list[tuple[bytes, str]] = []
        self.submitted: list[tuple[list[batch_pb2.BatchPacket], str, str | None]] = []

    async def upload(
        self, path: Path, content_type: str = "", *, digest: tuple[str, int] | None = None
    ) -> pb.Source:
        assert digest is not None and hashlib.sha256(path.read_bytes()).hexdigest() == digest[0]
        self.uploaded.append(digest[0])
        return pb.Source(sha256=digest[0])

    async def upload_bytes(self, data: bytes, content_type: str) -> pb.Source:
        self.manifests.append((data, content_type))
        return pb.Source(sha256=hashlib.sha256(data).hexdigest())

    async def submit_batch(
        self,
        packets: list[batch_pb2.BatchPacket] = [],  # noqa: B006 - never mutated
        *,
        manifest_sha256: str = "",
        request_id: str | None = None,
    ) -> batch_pb2.Batch:
        self.submitted.append((list(packets), manifest_sha256, request_id))
        return batch_pb2.Batch(name="batches/1", packet_count=3)


def _shared_cover_portfolio(root: Path) -> Path:
    for name in ("p1", "p2", "p3"):
        write_text_pdf(root / name / "cover.pdf", ["the same cover letter"])
        write_text_pdf(root / name / "terms.pdf", [f"terms of {name}"])
    return root


async def test_each_distinct_source_is_uploaded_once_then_one_inline_submit(
    tmp_path: Path,
) -> None:
    admission = RecordingAdmission()
    entries = read_batch(_shared_cover_portfolio(tmp_path / "portfolio"))
    await send_batch(admission, entries, request_id="retry-me")  # type: ignore[arg-type]
    assert len(admission.uploaded) == len(set(admission.uploaded)) == 4, "one cover, three terms"
    assert admission.manifests == []
    [(packets, manifest_sha256, request_id)] = admission.submitted
    assert (manifest_sha256, request_id) == ("", "retry-me")
    assert [p.bundle_id for p in packets] == ["p1", "p2", "p3"]
    covers = {p.manifest.items[0].sha256 for p in packets}
    assert len(covers) == 1 and covers <= set(admission.uploaded)
    assert {p.manifest.items[1].sha256 for p in packets} == set(admission.uploaded) - covers


async def test_a_batch_too_big_to_send_inline_goes_as_an_uploaded_manifest(
    tmp_path: Path,
) -> None:
    admission = RecordingAdmission()
    entries = read_batch(_shared_cover_portfolio(tmp_path / "portfolio"))
    await send_batch(admission, entries, inline_limit=100)  # type: ignore[arg-type]
    [(data, content_type)] = admission.manifests
    [(packets, manifest_sha256, _)] = admission.submitted
    assert packets == [] and manifest_sha256 == hashlib.sha256(data).hexdigest()
    assert content_type == "application/json"
    document = json.loads(data)
    assert [p["bundle_id"] for p in document["packets"]] == ["p1", "p2", "p3"]
    assert set(document["packets"][0]["items"][0]) == {"position", "document_id", "sha256"}


def test_the_same_packets_make_the_same_manifest_bytes() -> None:
    """A retried request id must name the same manifest, so its bytes are stable."""
    packet = batch_pb2.BatchPacket(bundle_id="a")
    packet.manifest.items.add(position=1, document_id="d", sha256=DIGEST)
    packet.manifest.ruleset = "strict"
    copy = batch_pb2.BatchPacket()
    copy.CopyFrom(packet)
    assert batch_manifest_json([packet]) == batch_manifest_json([copy])
    assert json.loads(batch_manifest_json([packet])) == {
        "packets": [
            {
                "bundle_id": "a",
                "items": [{"position": 1, "document_id": "d", "sha256": DIGEST}],
                "ruleset": "strict",
                "render_profile": "",
            }
        ]
    }


def _ended(completed: int, **others: int) -> batch_pb2.Batch:
    batch = batch_pb2.Batch(packet_count=completed + sum(others.values()))
    batch.finish_time.GetCurrentTime()
    for state, count in {"COMPLETED": completed, **others}.items():
        if count:
            batch.job_counts.add(state=state_value(state), count=count)  # type: ignore[arg-type]
    return batch


def test_the_exit_code_says_whether_every_packet_completed() -> None:
    assert batch_exit(_ended(5)) == ExitCode.OK
    assert batch_exit(_ended(4, REJECTED=1)) == ExitCode.REJECTED
    assert batch_exit(_ended(3, REJECTED=1, FAILED=1)) == ExitCode.FAILED
    assert batch_exit(_ended(4, CANCELLED=1)) == ExitCode.FAILED
    stopped = _ended(2)
    stopped.packet_count, stopped.cancelled_undispatched_count = 5, 3
    assert batch_exit(stopped) == ExitCode.FAILED
    unfinished = _ended(2)
    unfinished.ClearField("finish_time")
    unfinished.packet_count = 3
    assert batch_exit(unfinished) == ExitCode.FAILED


def test_the_batch_commands_and_their_options() -> None:
    parser = build_parser()
    submit = parser.parse_args(["batch", "submit", "dir", "--wait", "--request-id", "r1"])
    assert (submit.command, submit.action, submit.source) == ("batch", "submit", "dir")
    assert submit.wait and submit.request_id == "r1" and submit.timeout == 600.0
    status = parser.parse_args(["batch", "status", "b1", "--json", "--wait", "--timeout", "5"])
    assert (status.batch, status.json, status.timeout) == ("b1", True, 5.0)
    assert parser.parse_args(["batch", "cancel", "b1", "--request-id", "r2"]).request_id == "r2"
    assert parser.parse_args(["batch", "jobs", "batches/b1"]).batch == "batches/b1"
    assert batch_resource("b1") == batch_resource("batches/b1") == "batches/b1"


def test_without_a_terminal_a_batch_wait_prints_no_progress(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Progress is for a person at a terminal: a pipe or a log file gets the
    result and nothing else, on stdout or stderr."""
    monkeypatch.setattr("sys.stderr.isatty", lambda: False)
    with batch_progress("batches/1", enabled=progress_wanted(as_json=False)) as progress:
        progress.show(0, 5, "VALIDATING 5")
        progress.show(2, 5, "SIGNING 3  COMPLETED 2")
    with batch_progress("batches/1", enabled=True) as bar:
        bar.show(5, 5, "COMPLETED 5")  # drawn by rich on stderr, gone when done
    printed = capsys.readouterr()
    assert printed.out == ""
    assert "VALIDATING" not in printed.err and "ended" not in printed.err


# On the real stack.


async def _quire(data_dir: Path, *args: str) -> Any:
    return await asyncio.to_thread(run_quire, data_dir, *args)


@pytest.fixture
async def as_tenant(
    stack: Any, tenants: Any, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[AdmissionClient]:
    """A new tenant: the CLI runs as it (``QUIRE_TOKEN``), and so does the client given."""
    created = await tenants.admin.create_tenant(f"batch-cli-{uuid.uuid4().hex[:8]}")
    monkeypatch.setenv("QUIRE_TOKEN", created.secret)
    info = StackInfo.read(stack.data_dir)
    async with AdmissionClient(info.endpoints["admission"], created.secret) as client:
        yield client


@pytest.mark.stack
async def test_a_folder_of_packets_is_submitted_followed_listed_and_cancelled(
    stack: Any, as_tenant: AdmissionClient, tmp_path: Path
) -> None:
    data_dir = stack.data_dir
    folder = _shared_cover_portfolio(tmp_path / "portfolio")
    write_text_pdf(folder / "p4" / "terms.pdf", ["fourth"])
    whole = write_text_pdf(tmp_path / "cut.pdf", ["cut short"]).read_bytes()
    (folder / "p5").mkdir()
    (folder / "p5" / "cut.pdf").write_bytes(whole[: len(whole) // 2])

    request_id = str(uuid.uuid4())
    submitted = await _quire(
        data_dir, "batch", "submit", str(folder), "--wait", "--json", "--request-id", request_id
    )
    assert submitted.returncode == ExitCode.REJECTED, submitted.stdout + submitted.stderr
    batch = json.loads(submitted.stdout)["batch"]
    assert batch["state"] == "DONE" and batch["packet_count"] == 5
    assert {c["state"]: c["count"] for c in batch["job_counts"]} == {"COMPLETED": 4, "REJECTED": 1}
    again = await _quire(data_dir, "batch", "submit", str(folder), "--request-id", request_id)
    assert again.returncode == 0 and again.stdout.split()[0] == batch["name"], "a safe retry"

    listed = json.loads((await _quire(data_dir, "batch", "jobs", batch["name"], "--json")).stdout)
    packets = listed["jobs"]
    assert [(p["index"], p["bundle_id"]) for p in packets] == [(i, f"p{i + 1}") for i in range(5)]
    assert [p["state"] for p in packets] == ["COMPLETED"] * 4 + ["REJECTED"]
    assert (await as_tenant.get_job(packets[0]["job"])).bundle_id == "p1"

    shown = await _quire(data_dir, "batch", "status", batch["name"].removeprefix("batches/"))
    assert shown.returncode == 0 and shown.stdout.startswith(f"{batch['name']}  DONE")
    assert "  COMPLETED  4" in shown.stdout and "  REJECTED  1" in shown.stdout
    cancelled = await _quire(data_dir, "batch", "cancel", batch["name"], "--json")
    counts = json.loads(cancelled.stdout)
    assert cancelled.returncode == 0, cancelled.stderr
    assert (
        counts["not_dispatched_cancelled"],
        counts["in_flight_finishing"],
        counts["already_terminal"],
    ) == (0, 0, 5)


@pytest.mark.stack
async def test_a_manifest_batch_by_file_and_digest_is_waited_for_until_it_completes(
    stack: Any, as_tenant: AdmissionClient, tmp_path: Path
) -> None:
    data_dir = stack.data_dir
    cover = write_text_pdf(tmp_path / "docs" / "cover.pdf", ["cover"])
    await as_tenant.upload(cover)  # a source the tenant uploaded before
    manifest = _manifest(
        tmp_path / "batch.json",
        {
            "packets": [
                {
                    "bundle_id": "by-digest",
                    "items": [
                        {
                            "document_id": "cover",
                            "sha256": hashlib.sha256(cover.read_bytes()).hexdigest(),
                        }
                    ],
                },
                {"bundle_id": "by-file", "items": [{"document_id": "c", "file": "docs/cover.pdf"}]},
            ]
        },
    )
    impatient = await _quire(
        data_dir, "batch", "submit", str(manifest), "--wait", "--timeout", "0.001"
    )
    assert impatient.returncode == ExitCode.TIMEOUT, impatient.stderr
    assert "timed out" in impatient.stderr and "Traceback" not in impatient.stderr
    name = impatient.stdout.split()[0]
    assert name.startswith("batches/"), "the batch accepted is still printed"
    waited = await _quire(data_dir, "batch", "status", name, "--wait", "--json")
    assert waited.returncode == ExitCode.OK, waited.stdout + waited.stderr
    batch = json.loads(waited.stdout)["batch"]
    assert batch["terminal_count"] == 2 and "finish_time" in batch
