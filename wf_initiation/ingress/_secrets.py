"""Resolving secret references (``env:NAME``, ``file:/absolute/path``) in the ingress process.

The references are the deployment's (:class:`wf_initiation.core.connections.SecretRef`, the same
syntax and rules as connection secrets): a deployment never holds a secret itself, so nothing the
deployment or a Workfile carries into an activation (and so into workflow history) can contain
one. A ``file:`` secret is read by the same reader as a poll's (:mod:`wf_initiation._secret_files`:
a regular file of at most 64 KiB, a FIFO or device refused, never waited on), and re-read when the
file changes, so a mounted secret can be rotated without a restart.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from wf_initiation._secret_files import read_secret_bytes
from wf_initiation.core.connections import SecretRef
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
                not a regular file, empty or larger than ``MAX_SECRET_FILE_BYTES``; the message names
                the reference, never a value.
        """
        if ref.scheme == "env":
            found = self._environ.get(ref.target)
            if not found:
                raise SecretUnavailable(f"{ref.text}: the environment variable {ref.target} is not set (or empty)")
            return found.encode()
        return self._file(ref)

    def _file(self, ref: SecretRef) -> bytes:
        path = ref.target
        try:
            mtime = os.stat(path).st_mtime
            cached = self._files.get(path)
            if cached is not None and cached[0] == mtime:
                return cached[1]
            secret = read_secret_bytes(path).strip()
        except OSError as exc:
            raise SecretUnavailable(f"{ref.text}: cannot read {path} ({exc.strerror})") from None
        except ValueError as exc:  # not a regular file, or too large
            raise SecretUnavailable(f"{ref.text}: the file {path} is {exc}") from None
        if not secret:
            raise SecretUnavailable(f"{ref.text}: the file {path} is empty")
        self._files[path] = (mtime, secret)
        return secret
