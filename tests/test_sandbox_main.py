"""A sandbox worker does not import the service's main module.

multiprocessing has every child import the parent's ``__main__`` again; for
a stage that is the whole service, about a second of CPU and tens of MiB per
worker, paid again for every worker replaced after a hostile file. The
service here is a module run with ``-m`` that counts its own imports.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SERVICE = textwrap.dedent(
    """
    import asyncio
    import os
    import sys

    from quire.sandbox import SandboxPool
    from quire.settings import SandboxSettings

    with open(os.environ["IMPORTS_FILE"], "a") as imports:
        imports.write(f"{os.getpid()}\\n")


    async def main() -> None:
        pool = SandboxPool(SandboxSettings(workers=2), name="t", preload=("json",))
        try:
            await pool.warm()
            print(await pool.run(os.getpid))  # a task named by its own module
        finally:
            pool.close()


    if __name__ == "__main__":
        asyncio.run(main())
    """
)


def test_a_worker_runs_its_task_without_importing_the_service(tmp_path: Path) -> None:
    (tmp_path / "heavy_service.py").write_text(SERVICE)
    imports = tmp_path / "imports"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "IMPORTS_FILE": str(imports),
    }
    done = subprocess.run(
        [sys.executable, "-m", "heavy_service"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    worker_pid = int(done.stdout.split()[-1])
    importers = imports.read_text().split()
    assert worker_pid not in {int(pid) for pid in importers}
    assert len(importers) == 1, "only the service itself imported its main module"
