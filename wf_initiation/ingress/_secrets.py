"""Resolving secret references (``env:NAME``, ``file:/absolute/path``) in the ingress process.

The references are the deployment's (:class:`wf_initiation.core.connections.SecretRef`, the same
syntax and rules as connection secrets): a deployment never holds a secret itself, so nothing the
deployment or a Workfile carries into an activation (and so into workflow history) can contain
one. A ``file:`` secret is re-read when the file changes, so a mounted secret can be rotated
without a restart.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping

from wf_initiation.core.connections import MAX_SECRET_FILE_BYTES, SecretRef
from wf_initiation.errors import SecretUnavailable


class SecretResolver:
    """The values of secret references, from this process's environment and files.

    Args:
        environ: Where ``env:`` references are looked up (default: the process's environment).
    """

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = os.environ if environ is None else environ
        self._files: dict[str, tuple[float, bytes]] = {}

    def value(self, ref: SecretRef) -> bytes:
        """The secret ``ref`` names.

        Raises:
            SecretUnavailable: the variable is unset or empty, or the file is missing, unreadable,
                empty or larger than ``MAX_SECRET_FILE_BYTES``; the message names the reference,
                never a value.
        """
        if ref.scheme == "env":
            found = self._environ.get(ref.target)
            if not found:
                raise SecretUnavailable(f"{ref.text}: the environment variable {ref.target} is not set (or empty)")
            return found.encode()
        return self._file(ref)

    def _file(self, ref: SecretRef) -> bytes:
        path = pathlib.Path(ref.target)
        try:
            stat = path.stat()
            if stat.st_size > MAX_SECRET_FILE_BYTES:
                raise SecretUnavailable(f"{ref.text}: the file {path} is larger than {MAX_SECRET_FILE_BYTES} bytes")
            cached = self._files.get(ref.target)
            if cached is None or cached[0] != stat.st_mtime:
                secret = path.read_bytes().strip()
                if not secret:
                    raise SecretUnavailable(f"{ref.text}: the file {path} is empty")
                cached = self._files[ref.target] = (stat.st_mtime, secret)
        except OSError as exc:
            raise SecretUnavailable(f"{ref.text}: cannot read {path} ({exc.strerror})") from None
        return cached[1]
