"""`rss.item_published`: new items of an RSS, Atom, RDF or CDF feed fetched over HTTP(S).

``manifest.yaml`` (beside this file) is the contract; ``activity.py`` the poll activity, ``_http.py``
the bounded fetch, ``_feed.py`` parsing and the cursor. See docs/poll-contract.md.
"""

from wf_initiation._lazy import lazy_exports

__all__ = ["FeedEntry", "RssCursor", "fallback_id", "parse_cursor", "parse_feed", "poll_rss", "select_new"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "poll_rss": ".activity",
    **{name: "._feed" for name in ("FeedEntry", "RssCursor", "fallback_id", "parse_cursor", "parse_feed", "select_new")},
})
