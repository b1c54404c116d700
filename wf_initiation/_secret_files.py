"""Reading a secret file: the one reader behind every ``file:`` reference (the ingress's and the polls').

A ``file:`` reference names a path on the machine that resolves it; whoever wrote the deployment
may point it at anything there. So the file is opened without blocking and refused unless it is a
regular file (a FIFO or a device would be waited on forever, holding the ingress's startup or a
poll's thread), and at most :data:`~wf_initiation.core.connections.MAX_SECRET_FILE_BYTES` are read.
"""

from __future__ import annotations

import os
import stat

from wf_initiation.core.connections import MAX_SECRET_FILE_BYTES


def read_secret_bytes(path: str) -> bytes:
    """The file's bytes, as written (the caller trims and decodes them).

    Raises:
        ValueError: ``not a regular file`` (a FIFO, a device, a directory) or ``larger than 64 KiB``.
        OSError: the file is missing or unreadable.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = file.read(MAX_SECRET_FILE_BYTES + 1)
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise ValueError(f"larger than {MAX_SECRET_FILE_BYTES // 1024} KiB")
    return data
