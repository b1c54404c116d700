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
"""

from __future__ import annotations

import hashlib
import itertools
import struct
import zlib
from datetime import UTC, datetime

from ._types import Disposition, EngineState

CODES = list(Disposition)
_HEADER = struct.Struct("<4sI")
_MAGIC = b"WFR1"


class Retired:
    """Retired dedup entries, ordered by release time (for expiry)."""

    def __init__(self) -> None:
        self.by_hash: dict[bytes, tuple[bytes, int, int]] = {}

    def __len__(self) -> int:
        return len(self.by_hash)

    def add(self, key: str, digest_hex: str, disposition: Disposition, released_at: datetime) -> None:
        self.by_hash[key_hash(key)] = (bytes.fromhex(digest_hex[:12]), CODES.index(disposition), int(released_at.timestamp()))

    def get(self, key: str) -> tuple[str, Disposition, datetime] | None:
        found = self.by_hash.get(key_hash(key))
        if found is None:
            return None
        digest, code, released = found
        return digest.hex(), CODES[code], datetime.fromtimestamp(released, tz=UTC)

    def pop_expired(self, cutoff: datetime) -> int:
        """Remove entries released at or before ``cutoff``; entries are kept in release order."""
        limit = int(cutoff.timestamp())
        expired = []
        for h, (_, _, released) in self.by_hash.items():  # insertion order is release order
            if released > limit:
                break
            expired.append(h)
        for h in expired:
            del self.by_hash[h]
        return len(expired)

    def pop_oldest(self, n: int) -> tuple[int, datetime | None]:
        """Remove up to ``n`` entries released longest ago: (how many, the latest release among them)."""
        taken = list(itertools.islice(self.by_hash.items(), n))  # insertion order is release order
        for h, _ in taken:
            del self.by_hash[h]
        latest = datetime.fromtimestamp(taken[-1][1][2], tz=UTC) if taken else None
        return len(taken), latest

    def oldest(self) -> datetime | None:
        if not self.by_hash:
            return None
        first = next(iter(self.by_hash.values()))[2]
        return datetime.fromtimestamp(first, tz=UTC)

    def pack(self) -> bytes:
        items = sorted(self.by_hash.items(), key=lambda kv: kv[1][2])
        hashes = b"".join(h for h, _ in items)
        digests = b"".join(v[0] for _, v in items)
        codes = bytes(v[1] for _, v in items)
        times, previous = bytearray(), 0
        for _, (_, _, released) in items:
            times += struct.pack("<q", released - previous)
            previous = released
        tail = zlib.compress(codes + bytes(times), 9)
        return _HEADER.pack(_MAGIC, len(items)) + hashes + digests + tail

    @classmethod
    def unpack(cls, blob: bytes) -> Retired:
        out = cls()
        if not blob:
            return out
        magic, n = _HEADER.unpack_from(blob)
        if magic != _MAGIC:
            raise ValueError("not a retired-entries blob")
        off = _HEADER.size
        hashes, digests = blob[off : off + 8 * n], blob[off + 8 * n : off + 14 * n]
        tail = zlib.decompress(blob[off + 14 * n :])
        codes, times = tail[:n], tail[n:]
        released = 0
        for i in range(n):
            released += struct.unpack_from("<q", times, 8 * i)[0]
            out.by_hash[hashes[8 * i : 8 * i + 8]] = (digests[6 * i : 6 * i + 6], codes[i], released)
        return out


def key_hash(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()[:8]


_STATE_HEADER = struct.Struct("<4sI")
_STATE_MAGIC = b"WFS1"


def encode_state(state: EngineState, retired: Retired) -> bytes:
    """State for continue-as-new: zlib'd JSON plus the packed retired dedup entries."""
    body = zlib.compress(state.model_dump_json().encode(), 6)
    return _STATE_HEADER.pack(_STATE_MAGIC, len(body)) + body + retired.pack()


def decode_state(blob: bytes) -> EngineState:
    """The state :func:`encode_state` carried (its retired entries unpacked by the engine that takes it)."""
    magic, size = _STATE_HEADER.unpack_from(blob)
    if magic != _STATE_MAGIC:
        raise ValueError("unknown activation state format")
    start = _STATE_HEADER.size
    state = EngineState.model_validate_json(zlib.decompress(blob[start : start + size]))
    state.compact_events = blob[start + size :]
    return state
