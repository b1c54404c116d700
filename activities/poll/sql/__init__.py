"""`sql.row_inserted`: rows inserted into a SQLite or PostgreSQL table, after an increasing column.

``manifest.yaml`` (beside this file) is the contract; ``activity.py`` the poll activity; ``_query.py``
the query, cursor and items; ``_sqlite.py`` and ``_postgres.py`` the readers. See docs/poll-contract.md.
"""

from wf_initiation._lazy import lazy_exports

__all__ = ["SqlQuery", "json_safe", "parse_cursor", "parse_query", "poll_sql", "quote"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "poll_sql": ".activity",
    **{name: "._query" for name in ("SqlQuery", "json_safe", "parse_cursor", "parse_query", "quote")},
})
