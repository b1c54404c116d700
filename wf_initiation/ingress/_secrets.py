"""Secret references: ``env:NAME`` or ``file:PATH``, resolved in the ingress process only.

The same syntax as connection secrets (``wf_initiation.core.connections``, branch ``connectors``).
A deployment never holds a secret itself, so nothing the deployment or a Workfile carries into an
activation (and so into workflow history) can contain one. A ``file:`` secret is re-read when the
file changes, so a mounted secret can be rotated without a restart.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Mapping

PREFIXES = ("env:", "file:")


class SecretUnavailable(RuntimeError):
    """A reference that does not resolve; the message names the reference, never a value."""


def check_reference(ref: str) -> str:
    """Raise ``ValueError`` naming the fix unless ``ref`` is a well-formed reference."""
    if not isinstance(ref, str) or not ref.startswith(PREFIXES) or not ref.split(":", 1)[1].strip():
        raise ValueError(
            "a secret is given by reference, never inline: write env:NAME (an environment variable of the "
            "ingress process) or file:PATH (a file holding the secret)"
        )
    return ref


@dataclasses.dataclass
class SecretRef:
    """One reference; :meth:`value` resolves it (``file:`` re-read when its mtime changes)."""

    ref: str
    base_dir: str | None = None
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
        if not path.is_absolute() and self.base_dir:
            path = pathlib.Path(self.base_dir) / path
        try:
            mtime = path.stat().st_mtime
            if self._cached is None or self._cached[0] != mtime:
                secret = path.read_bytes().strip()
                if not secret:
                    raise SecretUnavailable(f"{self.ref}: the file {path} is empty")
                self._cached = (mtime, secret)
        except OSError as exc:
            raise SecretUnavailable(f"{self.ref}: cannot read {path} ({exc.strerror})") from None
        return self._cached[1]
