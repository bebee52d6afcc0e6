"""``make eval``: render the fidelity corpus, compare with what was approved.

    make eval                                  # report; exit 1 if anything changed
    .venv/bin/python -m bench.eval.main --approve   # accept this run's figures

The report is printed and written as JSON (``--report``, default
``eval-report.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.eval.compare import Change, compare
from bench.eval.measure import Grid, measure

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.json"
EXPECTED = HERE / "expected.json"


def run(
    manifest_path: Path = MANIFEST, expected_path: Path = EXPECTED
) -> tuple[dict[str, Any], list[Change]]:
    """This run's figures and what changed against ``expected_path``."""
    manifest = json.loads(manifest_path.read_text())
    grid = Grid(manifest["grid"]["rows"], manifest["grid"]["columns"], manifest["dpi"])
    expected = json.loads(expected_path.read_text()) if expected_path.exists() else {}
    figures: dict[str, Any] = {}
    changes: list[Change] = []
    for document in manifest["documents"]:
        for profile in manifest["profiles"]:
            key = f"{document['id']}/{profile}"
            measured = measure(
                manifest_path.parent / document["source"],
                document["id"],
                profile,
                document["image_pages"],
                grid,
            ).as_json()
            figures[key] = measured
            changes += compare(document["id"], profile, expected.get(key), measured, grid)
    for key in sorted(set(expected) - set(figures)):
        document, _, profile = key.partition("/")
        changes.append(Change(document, profile, None, "gone from the corpus"))
    return figures, changes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--approve", action="store_true", help="write this run's figures")
    parser.add_argument("--report", type=Path, default=Path("eval-report.json"))
    args = parser.parse_args()
    figures, changes = run()
    pages = sum(figure["pages"] for figure in figures.values())
    print(f"fidelity corpus: {len(figures)} renderings, {pages} pages")
    for change in changes:
        print(f"  {change.line()}")
    changed = sorted({f"{c.document}/{c.profile}" for c in changes})
    print(f"changed: {len(changed)} of {len(figures)} renderings" if changes else "no change")
    args.report.write_text(
        json.dumps(
            {"changed": changed, "changes": [c.__dict__ for c in changes], "figures": figures},
            indent=2,
        )
        + "\n"
    )
    if args.approve:
        EXPECTED.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
        print(f"approved: {EXPECTED.relative_to(HERE.parent.parent)} written; review and commit it")
        return 0
    return 1 if changes else 0


if __name__ == "__main__":
    sys.exit(main())
