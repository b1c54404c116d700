"""Replay every history kept by a session run with ``WFI_KEEP_HISTORIES=DIR`` against this build.

    .venv/bin/python -m tests.support.replay_folder DIR

A change to the activation workflow must replay what the build before it recorded: run the suite
with the earlier build and WFI_KEEP_HISTORIES, then this with the new one. Prints each failure and
a count; exits 1 if any history does not replay.
"""

from __future__ import annotations

import asyncio
import gzip
import pathlib
import sys

from temporalio.client import WorkflowHistory

from tests.support.replay import replay_failure


async def main(folder: pathlib.Path) -> int:
    files = sorted(folder.glob("*.json.gz"))
    failed = 0
    for path in files:
        workflow_id = path.name.split("-0")[0]
        history = WorkflowHistory.from_json(workflow_id, gzip.decompress(path.read_bytes()).decode())
        failure = await replay_failure(history)
        if failure is not None:
            failed += 1
            print(f"FAIL {path.name}: {failure}", flush=True)
    print(f"{len(files) - failed}/{len(files)} histories replay")
    return 1 if failed or not files else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(pathlib.Path(sys.argv[1]))))
