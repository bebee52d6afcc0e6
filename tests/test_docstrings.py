"""Every public class of the services says what it is: a class whose name
does not start with ``_`` has a docstring (issue 39). Generated code
(``*_pb2.py``, ``*_pb2_grpc.py``), migrations and build folders are left out."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ROOT / "services"
GENERATED = ("_pb2.py", "_pb2_grpc.py")
LEFT_OUT = frozenset({"migrations", "build"})


def _modules() -> list[Path]:
    return sorted(
        path
        for path in SERVICES.glob("*/quire/**/*.py")
        if not path.name.endswith(GENERATED)
        and LEFT_OUT.isdisjoint(path.relative_to(SERVICES).parts)
    )


def undocumented(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """The public classes of ``source`` without a docstring, nested ones
    included: (line, name), in line order."""
    return sorted(
        (node.lineno, node.name)
        for node in ast.walk(ast.parse(source, filename))
        if isinstance(node, ast.ClassDef)
        and not node.name.startswith("_")
        and ast.get_docstring(node) is None
    )


def test_the_walk_finds_a_class_without_a_docstring() -> None:
    source = (
        'class Told:\n    """Said."""\n\n'
        "class Untold:\n    size: int\n\n"
        "class _Own:\n    pass\n\n"
        "def made():\n    class Inner:\n        pass\n"
    )
    assert undocumented(source) == [(4, "Untold"), (11, "Inner")]


def test_every_public_class_of_the_services_has_a_docstring() -> None:
    modules = _modules()
    walked = {path.relative_to(SERVICES).parts[0] for path in modules}
    assert walked == {path.parent.name for path in SERVICES.glob("*/quire")}
    offenders = [
        f"{path.relative_to(ROOT)}:{line} {name}"
        for path in modules
        for line, name in undocumented(path.read_text(), str(path))
    ]
    assert not offenders, "public classes without a docstring:\n" + "\n".join(offenders)
