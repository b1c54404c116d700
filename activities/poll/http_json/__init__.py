"""`http_json.item_added`: new items of a JSON API listing, polled over HTTP(S), page by page.

``manifest.yaml`` (beside this file) is the contract; ``activity.py`` the poll activity, ``_source.py``
the configuration, paths and cursor, ``_walk.py`` a poll's pages, ``_http.py`` one bounded request.
See docs/poll-contract.md.
"""

from wf_initiation._lazy import lazy_exports

__all__ = ["JsonSource", "Position", "at_path", "parse_position", "parse_source", "poll_http_json", "retry_after"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "poll_http_json": ".activity",
    "retry_after": "._http",
    **{name: "._source" for name in ("JsonSource", "Position", "at_path", "parse_position", "parse_source")},
})
