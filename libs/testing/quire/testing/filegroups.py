"""Test files that share one stack run on one pytest-xdist worker.

``--dist loadfile`` hands each worker whole files, so a module-scoped stack
starts once per file. When several files need a stack with the same settings
(short leases and fault points, say), it is a session fixture they share; but
left to ``loadfile``, each worker that draws one of those files starts its
own. ``FileGroupScheduling`` hands a group's files out as one unit, so they
run one after another on one worker, which starts the stack once.

Files go out in collection order (the suite sorts its longest files first);
run pytest with ``--no-loadscope-reorder`` so xdist does not re-sort them by
their number of tests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

from xdist.scheduler import LoadFileScheduling

GROUP_PREFIX = "group:"


class FileGroupScheduling(LoadFileScheduling):
    """``loadfile``, except that the files of one group are one unit of work."""

    def __init__(
        self, config: Any, log: Any = None, *, groups: Mapping[str, Iterable[str]]
    ) -> None:
        super().__init__(config, log)
        self._group_of = {file: name for name, files in groups.items() for file in files}

    def _split_scope(self, nodeid: str) -> str:
        path = super()._split_scope(nodeid)
        group = self._group_of.get(PurePosixPath(path).name)
        return GROUP_PREFIX + group if group else path
