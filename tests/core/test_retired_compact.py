"""The compact retired dedup entries (core/engine/_codec.Retired) behave as a plain dict of them would.

The worker keeps retired ids in columns with a sorted index (about 27 bytes each instead of ~240 as
Python objects, bench/bench_memory.py); these tests hold it to the plain model it replaced: a dict
from key hash to (digest, code, released) in release order, packed sorted by release time.
"""

from __future__ import annotations

import hashlib
import itertools
import struct
import zlib
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from wf_initiation.core.engine._codec import CODES, Retired, key_hash
from wf_initiation.core.engine._types import Disposition

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Model:
    """The plain form: what Retired held before it was compact."""

    def __init__(self) -> None:
        self.by_hash: dict[bytes, tuple[bytes, int, int]] = {}

    def add(self, key: str, digest: str, disposition: Disposition, released: datetime) -> None:
        self.by_hash[key_hash(key)] = (bytes.fromhex(digest[:12]), CODES.index(disposition), int(released.timestamp()))

    def get(self, key: str) -> tuple[str, Disposition, datetime] | None:
        found = self.by_hash.get(key_hash(key))
        return None if found is None else (found[0].hex(), CODES[found[1]], datetime.fromtimestamp(found[2], tz=UTC))

    def pop_expired(self, cutoff: datetime) -> int:
        gone = list(itertools.takewhile(lambda kv: kv[1][2] <= int(cutoff.timestamp()), self.by_hash.items()))
        for h, _ in gone:
            del self.by_hash[h]
        return len(gone)

    def pop_oldest(self, n: int) -> tuple[int, datetime | None]:
        taken = list(itertools.islice(self.by_hash.items(), n))
        for h, _ in taken:
            del self.by_hash[h]
        return len(taken), datetime.fromtimestamp(taken[-1][1][2], tz=UTC) if taken else None

    def oldest(self) -> datetime | None:
        return datetime.fromtimestamp(next(iter(self.by_hash.values()))[2], tz=UTC) if self.by_hash else None

    def pack(self) -> bytes:
        items = sorted(self.by_hash.items(), key=lambda kv: kv[1][2])
        deltas = [b - a for a, b in itertools.pairwise([0, *(v[2] for _, v in items)])]
        tail = zlib.compress(bytes(v[1] for _, v in items) + b"".join(struct.pack("<q", d) for d in deltas), 9)
        return struct.pack("<4sI", b"WFR1", len(items)) + b"".join(h for h, _ in items) + b"".join(v[0] for _, v in items) + tail


def _digest(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 3)),  # add that many entries, released now
        st.tuples(st.just("add_past"), st.integers(1, 30)),  # one entry released that many seconds ago
        st.tuples(st.just("expire"), st.integers(0, 40)),  # expire what was released that many seconds ago
        st.tuples(st.just("shed"), st.integers(0, 5)),
        st.tuples(st.just("carry"), st.just(0)),  # continue-as-new: pack, then unpack
    ),
    max_size=60,
)


@given(ops)
@settings(max_examples=200, deadline=None)
def test_compact_retired_entries_answer_as_the_plain_dict_did(steps: list[tuple[str, int]]) -> None:
    retired, model, now, n = Retired(), Model(), T0, 0
    seen: list[str] = []
    for op, arg in steps:
        now += timedelta(seconds=1)
        if op == "add":
            for _ in range(arg):
                key = f"hooks\x1fid-{n}"
                disposition = CODES[n % len(CODES)]
                retired.add(key, _digest(n), disposition, now)
                model.add(key, _digest(n), disposition, now)
                seen.append(key)
                n += 1
        elif op == "add_past":
            key = f"hooks\x1fid-{n}"
            retired.add(key, _digest(n), Disposition.SUPPRESSED, now - timedelta(seconds=arg))
            model.add(key, _digest(n), Disposition.SUPPRESSED, now - timedelta(seconds=arg))
            seen.append(key)
            n += 1
        elif op == "expire":
            assert retired.pop_expired(now - timedelta(seconds=arg)) == model.pop_expired(now - timedelta(seconds=arg))
        elif op == "shed":
            assert retired.pop_oldest(arg) == model.pop_oldest(arg)
        else:
            assert retired.pack() == model.pack()
            retired = Retired.unpack(retired.pack())
            model.by_hash = dict(sorted(model.by_hash.items(), key=lambda kv: kv[1][2]))  # read back in release order
        assert len(retired) == len(model.by_hash)
        assert retired.oldest() == model.oldest()
    for key in [*seen, "hooks\x1fnever-seen"]:
        assert retired.get(key) == model.get(key)


def test_the_carried_form_is_what_the_plain_dict_packed() -> None:
    """The bytes carried across continue-as-new did not change: a run of the earlier build reads them."""
    retired = Retired()
    for i in range(500):
        retired.add(f"hooks\x1fid-{i}", _digest(i), CODES[i % len(CODES)], T0 + timedelta(seconds=i // 7))
    model = Model()
    for i in range(500):
        model.add(f"hooks\x1fid-{i}", _digest(i), CODES[i % len(CODES)], T0 + timedelta(seconds=i // 7))
    assert retired.pack() == model.pack()
    again = Retired.unpack(retired.pack())
    again.pop_expired(T0 + timedelta(seconds=3))
    model.pop_expired(T0 + timedelta(seconds=3))
    again.add("hooks\x1flate", _digest(9999), Disposition.SUPPRESSED, T0 + timedelta(seconds=999))
    model.add("hooks\x1flate", _digest(9999), Disposition.SUPPRESSED, T0 + timedelta(seconds=999))
    assert again.pack() == model.pack()
    assert Retired.unpack(again.pack()).pack() == again.pack()
    assert again.get("hooks\x1fid-499") == (_digest(499)[:12], CODES[499 % len(CODES)], T0 + timedelta(seconds=71))
    assert again.get("hooks\x1fid-0") is None  # expired
    assert len(again) == 500 - 28 + 1


def test_a_shard_packed_in_chunks_is_what_the_plain_dict_packed() -> None:
    """Past one chunk of instants (``_codec._DELTAS_PER_CHUNK``) and with an offset start (expired
    entries before it), the streamed columns are the same bytes as the plain form's."""
    retired, model = Retired(), Model()
    for i in range(20_000):
        for side in (retired, model):
            side.add(f"hooks\x1fid-{i}", _digest(i), CODES[i % len(CODES)], T0 + timedelta(seconds=i // 3))
    assert retired.pack() == model.pack()
    again = Retired.unpack(retired.pack())
    assert again.pop_expired(T0 + timedelta(seconds=100)) == model.pop_expired(T0 + timedelta(seconds=100)) == 303
    for side in (again, model):
        side.add("hooks\x1flate", _digest(-1), Disposition.ACCEPTED, T0 + timedelta(days=1))
    assert again.pack() == model.pack()
    assert again.get("hooks\x1fid-19999") == model.get("hooks\x1fid-19999")
