"""PostScript calculator functions (``/FunctionType 4``) a viewer could not
run to the end: a static bound, before anything evaluates them.

A calculator program is a brace-delimited list of numbers, booleans and
operators, with ``if``/``ifelse`` blocks. The specification gives it an
operand stack of 100 entries; viewers that grow it without bound, or
recurse on each nested block, can be stopped by a program built for them.
Refused (``STRUCTURE_TOO_DEEP``) when blocks nest deeper than
``MAX_NESTING`` or a straight run of the program can push more than
``STACK_LIMIT`` entries: counted as if every block ran (an over-estimate a
real function never nears, and a pop inside a block credited to nothing,
since the block may not run): ``n index`` pushes one entry and ``n copy``
pushes n, when n is written in the program; computed, either is charged the
whole stack. The function's inputs start on the stack.
"""

from __future__ import annotations

import re

__all__ = ["MAX_NESTING", "STACK_LIMIT", "unbounded_calculator"]

MAX_NESTING = 16
STACK_LIMIT = 100
_TOKEN = re.compile(rb"[{}]|[^\s{}]+")
_POPS_ONE = frozenset(
    b"add sub mul div idiv mod atan exp and or xor bitshift eq ne gt ge lt le pop".split()
)
_GROWS_ONE = frozenset(b"dup".split())


def _number(token: bytes) -> int | None:
    try:
        return int(token)
    except ValueError:
        return None


def unbounded_calculator(program: bytes, inputs: int = 0) -> bool:
    """Whether ``program`` (a calculator function's decoded stream, taking
    ``inputs`` operands) nests or can grow its operand stack past the bounds
    above."""
    depth = 0
    height = max(0, inputs)
    previous: int | None = None
    for token in _TOKEN.findall(program):
        literal = None
        if token == b"{":
            depth += 1
            if depth > MAX_NESTING:
                return True
        elif token == b"}":
            depth -= 1
        elif token == b"index":
            height += 1 if previous is not None and previous >= 0 else STACK_LIMIT
        elif token == b"copy":
            height += previous if previous is not None and previous >= 0 else STACK_LIMIT
        elif token in _GROWS_ONE or token in (b"true", b"false"):
            height += 1
        elif token[:1].isdigit() or token[:1] in b"+-.":
            height += 1
            literal = _number(token)
        elif token in _POPS_ONE and depth <= 1:
            height = max(0, height - 1)
        previous = literal
        if height > STACK_LIMIT:
            return True
    return depth < 0
