"""Where this project depends on what the Temporal SDK does rather than on what it promises.

Each function here reads something the SDK exposes only as message text or a private attribute.
They are the only places that do, and ``tests/test_sdk_workarounds.py`` checks each against the
installed SDK, so an SDK upgrade that changes one fails there, naming the function, instead of
silently changing behaviour. Pure Python, passed through the workflow sandbox.
"""

from __future__ import annotations

from typing import Any

FAILED_DECODING = "Failed decoding"


def failed_decoding(failure: Any) -> bool:
    """Whether an activity failed because the worker could not decode its argument.

    The SDK reports that as a retryable ``ApplicationError`` whose message starts with
    "Failed decoding arguments" (temporalio/worker/_activity.py); a retry can never pass, so the
    activation treats it as permanent. No error type or flag says so.
    """
    return (getattr(failure, "message", None) or "").startswith(FAILED_DECODING)
