"""`sheet.row_added`: rows appended to a sheet kept as a CSV file on disk.

``manifest.yaml`` (beside this file) is the contract; ``activity.py`` the poll activity (file
location, containment, bounded read); ``_rows.py`` rows and cursor. See docs/poll-contract.md.
"""

from wf_initiation._lazy import lazy_exports

__all__ = ["SheetRow", "parse_cursor", "parse_rows", "poll_sheet", "select_after", "sheet_path"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "poll_sheet": ".activity", "sheet_path": ".activity",
    **{name: "._rows" for name in ("SheetRow", "parse_cursor", "parse_rows", "select_after")},
})
