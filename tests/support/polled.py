"""An activation polling a SQL table, for the engine's poll tests (tests of the pure engine)."""

from __future__ import annotations

import pathlib
from datetime import UTC, datetime
from typing import Any

from tests.support.activation import make_spec
from wf_initiation.core.activation import ActivationSpec

T0 = datetime(2025, 1, 1, tzinfo=UTC)

SQL = """
name: {name}
on:
  sql.row_inserted: {{table: items, column: seq, id_column: item_id}}
  as: row
{extra}
"""


def spec_for(tmp: pathlib.Path, *, extra: str = "", **settings: Any) -> ActivationSpec:
    settings.setdefault("connections", {"db": {"connector": "sql", "sqlite": str(tmp / "source.db")}})
    settings.setdefault("poll", {"interval": "10s", "backoff_initial": "1s", "backoff_max": "8s", "limit": 3})
    return make_spec(tmp, SQL.format(name="polled", extra=extra), task_queue="unused", **settings)


def row(seq: int, item_id: str | None, kind: str = "plain") -> dict[str, Any]:
    """A payload as ``sql.row_inserted`` returns it (an empty identity is still an item)."""
    return {"row_id": item_id or "", "table": "items", "row": {"seq": seq, "item_id": item_id, "kind": kind}}
