"""One reader for every ``file:`` secret: the ingress's (``SecretResolver``) and the polls'
(``read_secret_file``) refuse the same files, a FIFO among them, without waiting on it."""

from __future__ import annotations

import os
import pathlib

import pytest

from wf_initiation.activities.poll._runtime import read_secret_file
from wf_initiation.core.connections import MAX_SECRET_FILE_BYTES, parse_ref
from wf_initiation.errors import SecretUnavailable
from wf_initiation.ingress._secrets import SecretResolver


def _ref(path: pathlib.Path):
    ref = parse_ref(f"file:{path}")
    assert ref is not None
    return ref


def test_the_ingress_refuses_a_fifo_at_once_as_the_polls_do(tmp_path: pathlib.Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # nobody writes to it: a blocking read would wait forever
    with pytest.raises(SecretUnavailable, match=r"is not a regular file"):
        SecretResolver().value(_ref(fifo))
    with pytest.raises(ValueError, match="not a regular file"):
        read_secret_file(str(fifo))


def test_the_ingress_reads_a_secret_file_at_the_limit_refuses_one_byte_more_and_rereads_it_when_changed(
    tmp_path: pathlib.Path,
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s" * MAX_SECRET_FILE_BYTES)
    resolver = SecretResolver()
    assert resolver.value(_ref(secret)) == b"s" * MAX_SECRET_FILE_BYTES
    secret.write_text("rotated\n")
    os.utime(secret, (1, 1))  # a new modification time, however coarse the file system's clock
    assert resolver.value(_ref(secret)) == b"rotated"
    secret.write_text("s" * (MAX_SECRET_FILE_BYTES + 1))
    with pytest.raises(SecretUnavailable, match="larger than 64 KiB") as raised:
        resolver.value(_ref(secret))
    assert "sss" not in str(raised.value), "the message names the reference, never a value"
    secret.write_text(" \n")
    os.utime(secret, (2, 2))
    with pytest.raises(SecretUnavailable, match="is empty"):
        resolver.value(_ref(secret))
    with pytest.raises(SecretUnavailable, match="cannot read"):
        resolver.value(_ref(tmp_path / "missing"))
