"""Secret references: ``env:NAME`` or ``file:/absolute/path``, resolved in the ingress process only.

The same syntax and rules as connection secrets (``wf_initiation.core.connections``).
A deployment never holds a secret itself, so nothing the deployment or a Workfile carries into an
activation (and so into workflow history) can contain one. A ``file:`` secret is re-read when the
file changes, so a mounted secret can be rotated without a restart.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Mapping

from wf_initiation.core.connections import MAX_SECRET_FILE_BYTES


class SecretUnavailable(RuntimeError):
    """A reference that does not resolve; the message names the reference, never a value."""


@dataclasses.dataclass
class SecretRef:
    """One reference; :meth:`value` resolves it (``file:`` re-read when its mtime changes)."""

    ref: str
    environ: Mapping[str, str] = dataclasses.field(default_factory=lambda: os.environ)
    _cached: tuple[float, bytes] | None = dataclasses.field(default=None, repr=False)

    def value(self) -> bytes:
        kind, _, name = self.ref.partition(":")
        if kind == "env":
            found = self.environ.get(name)
            if not found:
                raise SecretUnavailable(f"{self.ref}: the environment variable {name} is not set (or empty)")
            return found.encode()
        return self._file(name)

    def _file(self, name: str) -> bytes:
        path = pathlib.Path(name)
        try:
            stat = path.stat()
            if stat.st_size > MAX_SECRET_FILE_BYTES:
                raise SecretUnavailable(f"{self.ref}: the file {path} is larger than {MAX_SECRET_FILE_BYTES} bytes")
            if self._cached is None or self._cached[0] != stat.st_mtime:
                secret = path.read_bytes().strip()
                if not secret:
                    raise SecretUnavailable(f"{self.ref}: the file {path} is empty")
                self._cached = (stat.st_mtime, secret)
        except OSError as exc:
            raise SecretUnavailable(f"{self.ref}: cannot read {path} ({exc.strerror})") from None
        return self._cached[1]
