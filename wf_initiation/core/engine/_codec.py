"""Compact form of retired dedup entries, so one activation carries >100k ids across continue-as-new.

A *retired* entry is a dedup entry whose retention clock has started (its event was suppressed or
its run is terminal): all the engine still needs is "this identity was seen, with this payload,
this disposition, until this instant". It is kept as

    key hash (8 bytes of SHA-256 of entry + delivery id) | payload digest (6 bytes) |
    disposition code (1 byte) | released-at (Unix seconds, delta-coded)

stored column by column (hashes, digests, codes, times) and the compressible columns zlib'd:
about 14-15 bytes per id, so 100k ids take ~1.5 MB of the 2 MiB payload limit. Collision odds are
~n^2/2^65 for keys (3e-10 at 100k) and 2^-48 for a conflicting payload taken as a duplicate.
The human-readable delivery id of a retired entry is not kept; lookups by id still work.
In the worker the same columns are kept as they are, with a sorted index (``Retired``).
"""

from __future__ import annotations

import hashlib
import io
import itertools
import struct
import sys
import zlib
from array import array
from collections.abc import Iterator
from datetime import UTC, datetime

from ._types import Disposition, EngineState

CODES = list(Disposition)
_DELTAS_PER_CHUNK = 8192
_HEADER = struct.Struct("<4sI")
_MAGIC = b"WFR1"


class Retired:
    """Retired dedup entries, ordered by release time (for expiry), held in their compact form.

    The entries a run starts from (unpacked from the carried state) stay in columns, in release
    order: key hashes (8 bytes each), digests (6), disposition codes (1) and release instants (4:
    seconds after the earliest), with an index of release-order positions (4) grouped by the key
    hash's top bits (buckets of four to eight entries; one offset per bucket, under a byte per id):
    about 24 bytes per id in the worker. The index is built by counting, in passes over the keys,
    so loading a full shard leaves no Python object per id behind (a sort of 80,000 ids did: ~6 MB
    of freed memory that the worker's process keeps). Expiry and shedding take entries from the
    front of the release order, so they only move ``_start``. Entries retired during the run (a few
    thousand at most: ``retire_released`` runs before continue-as-new) wait in a dict until the next
    ``pack``.
    """

    def __init__(self) -> None:
        self._keys = array("Q")  # key hashes as integers (see _as_int), in release order
        self._digests = b""
        self._codes = b""
        self._epoch = 0  # release instants are kept as seconds after it (4 bytes each: 136 years)
        self._times = array("I")
        self._shift = 64  # a key's bucket: its hash >> _shift
        self._offsets = array("I", [0, 0])  # bucket b's positions: _slots[_offsets[b]:_offsets[b + 1]]
        self._slots = array("I")  # release-order positions, bucket by bucket (ascending within one)
        self._start = 0  # entries before it in release order are gone (expired or shed)
        self._recent: dict[bytes, tuple[bytes, int, int]] = {}

    def __len__(self) -> int:
        return len(self._times) - self._start + len(self._recent)

    def add(self, key: str, digest_hex: str, disposition: Disposition, released_at: datetime) -> None:
        self._recent[key_hash(key)] = (bytes.fromhex(digest_hex[:12]), CODES.index(disposition), int(released_at.timestamp()))

    def get(self, key: str) -> tuple[str, Disposition, datetime] | None:
        h = key_hash(key)
        found = self._recent.get(h)
        if found is None:
            found = self._base(h)
            if found is None:
                return None
        digest, code, released = found
        return digest.hex(), CODES[code], datetime.fromtimestamp(released, tz=UTC)

    def _base_at(self, at: int) -> tuple[bytes, int, int]:
        return self._digests[6 * at : 6 * at + 6], self._codes[at], self._epoch + self._times[at]

    def _base(self, h: bytes) -> tuple[bytes, int, int] | None:
        value = _as_int(h)
        bucket = value >> self._shift
        keys, slots, start = self._keys, self._slots, self._start
        for i in range(self._offsets[bucket], self._offsets[bucket + 1]):
            at = slots[i]
            if at >= start and keys[at] == value:
                return self._base_at(at)
        return None

    def pop_expired(self, cutoff: datetime) -> int:
        """Remove entries released at or before ``cutoff``; entries are kept in release order."""
        limit = int(cutoff.timestamp())
        start, times = self._start, self._times
        while start < len(times) and self._epoch + times[start] <= limit:
            start += 1
        removed, self._start = start - self._start, start
        if start == len(times):  # the columns are spent: the recent entries come next in release order
            expired = []
            for h, (_, _, released) in self._recent.items():  # insertion order is release order
                if released > limit:
                    break
                expired.append(h)
            for h in expired:
                del self._recent[h]
            removed += len(expired)
        return removed

    def pop_oldest(self, n: int) -> tuple[int, datetime | None]:
        """Remove up to ``n`` entries released longest ago: (how many, the latest release among them)."""
        from_base = min(n, len(self._times) - self._start)
        latest = self._epoch + self._times[self._start + from_base - 1] if from_base else None
        self._start += from_base
        taken = list(itertools.islice(self._recent.items(), n - from_base))
        for h, _ in taken:
            del self._recent[h]
        if taken:
            latest = taken[-1][1][2]
        return from_base + len(taken), None if latest is None else datetime.fromtimestamp(latest, tz=UTC)

    def oldest(self) -> datetime | None:
        if self._start < len(self._times):
            first = self._epoch + self._times[self._start]
        elif self._recent:
            first = next(iter(self._recent.values()))[2]
        else:
            return None
        return datetime.fromtimestamp(first, tz=UTC)

    def _hashes_in_release_order(self) -> array[int]:
        return self._keys[self._start :]

    def pack(self) -> bytes:
        """The carried form: the entries sorted by release time (stable), column by column."""
        out = io.BytesIO()
        self.write(out)
        return out.getvalue()

    def write(self, out: io.BytesIO) -> None:
        """Write :meth:`pack`'s bytes to ``out``. The columns go from where they are held, the instants'
        deltas in chunks through one compressor: at continue-as-new, the worker's peak memory is
        the carried state's copies (bench/bench_memory.py), so packing adds no copy of a column."""
        with memoryview(self._times) as held:  # released at the end: the columns stay resizable
            self._write(out, held[self._start :])

    def _write(self, out: io.BytesIO, base: memoryview) -> None:
        recent = list(self._recent.items())
        epoch, start = self._epoch, self._start

        def times() -> Iterator[int]:  # one instant at a time: no Python object per id outlives its step
            yield from (epoch + t for t in base)
            yield from (v[2] for _, v in recent)

        n = len(base) + len(recent)
        out.write(_HEADER.pack(_MAGIC, n))
        tail = zlib.compressobj(9)
        if all(a <= b for a, b in itertools.pairwise(times())):  # as retiring keeps them: the columns as they are
            keys = self._keys
            if sys.byteorder != "big":  # written big-endian, in place and back
                keys.byteswap()
            try:
                out.write(memoryview(keys)[start:])
            finally:
                if sys.byteorder != "big":
                    keys.byteswap()
            out.writelines(h for h, _ in recent)
            out.write(memoryview(self._digests)[6 * start :])
            out.writelines(v[0] for _, v in recent)
            chunks = [tail.compress(memoryview(self._codes)[start:]), tail.compress(bytes(v[1] for _, v in recent))]
            instants: Iterator[int] = times()
        else:
            held = [(_as_bytes(h), self._base_at(start + i)) for i, h in enumerate(self._hashes_in_release_order())]
            items = sorted([*held, *recent], key=lambda kv: kv[1][2])
            out.writelines(h for h, _ in items)
            out.writelines(v[0] for _, v in items)
            chunks = [tail.compress(bytes(v[1] for _, v in items))]
            instants = (v[2] for _, v in items)
        deltas = (b - a for a, b in itertools.pairwise(itertools.chain([0], instants)))
        while chunk := array("q", itertools.islice(deltas, _DELTAS_PER_CHUNK)):
            if sys.byteorder != "little":
                chunk.byteswap()
            chunks.append(tail.compress(chunk))
        chunks.append(tail.flush())
        out.writelines(chunks)

    @classmethod
    def unpack(cls, blob: bytes) -> Retired:
        out = cls()
        if not blob:
            return out
        magic, n = _HEADER.unpack_from(blob)
        if magic != _MAGIC:
            raise ValueError("not a retired-entries blob")
        off = _HEADER.size
        with memoryview(blob) as view:  # read in place: a column is copied once, into its array
            keys = array("Q")
            keys.frombytes(view[off : off + 8 * n])
            out._digests = bytes(view[off + 8 * n : off + 14 * n])
            tail = zlib.decompress(view[off + 14 * n :])
        out._codes = tail[:n]
        deltas = array("q")
        with memoryview(tail) as instants:
            deltas.frombytes(instants[n : n + 8 * n])
        del tail
        if sys.byteorder != "little":
            deltas.byteswap()
        for i in range(1, n):  # deltas -> instants, in place
            deltas[i] += deltas[i - 1]
        out._epoch = min(deltas) if n else 0  # the earliest (the first, as pack sorts them)
        out._times = array("I", (t - out._epoch for t in deltas))
        del deltas
        if sys.byteorder != "big":  # the key hash read as a big-endian integer (see _as_int)
            keys.byteswap()
        out._keys = keys
        out._index()
        return out

    def _index(self) -> None:
        """Group the release-order positions by the top bits of their key hash (a counting sort):
        about one entry per bucket, two passes over the keys, no object kept per id."""
        keys = self._keys
        bits = max(1, len(keys).bit_length() - 3)  # between n/8 and n/4 buckets: 4-8 entries each
        shift = 64 - bits
        offsets = array("I", bytes(4 * ((1 << bits) + 1)))
        for value in keys:
            offsets[(value >> shift) + 1] += 1
        total = 0
        for b in range(len(offsets)):
            total += offsets[b]
            offsets[b] = total
        fill = array("I", offsets)
        slots = array("I", bytes(4 * len(keys)))
        for at, value in enumerate(keys):
            b = value >> shift
            slots[fill[b]] = at
            fill[b] += 1
        self._shift, self._offsets, self._slots = shift, offsets, slots


def _as_int(h: bytes) -> int:
    return int.from_bytes(h, "big")


def _as_bytes(value: int) -> bytes:
    return value.to_bytes(8, "big")


def key_hash(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()[:8]


_STATE_HEADER = struct.Struct("<4sI")
_STATE_MAGIC = b"WFS1"


def encode_state(state: EngineState, retired: Retired) -> bytes:
    """State for continue-as-new: zlib'd JSON plus the packed retired dedup entries."""
    body = zlib.compress(state.model_dump_json().encode(), 6)
    out = io.BytesIO()
    out.write(_STATE_HEADER.pack(_STATE_MAGIC, len(body)))
    out.write(body)
    retired.write(out)
    return out.getvalue()  # the buffer itself, not a copy


def decode_state(blob: bytes) -> EngineState:
    """The state :func:`encode_state` carried (its retired entries unpacked by the engine that takes it)."""
    magic, size = _STATE_HEADER.unpack_from(blob)
    if magic != _STATE_MAGIC:
        raise ValueError("unknown activation state format")
    start = _STATE_HEADER.size
    state = EngineState.model_validate_json(zlib.decompress(blob[start : start + size]))
    state.compact_events = blob[start + size :]
    return state
