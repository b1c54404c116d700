"""The replies Workfile that waiting runs subscribe to (INIT-8..10), for the engine's tests and the
real ones alike."""

from __future__ import annotations

from typing import Any

# Replies to a conversation: events of `reply` go to the run waiting on their thread; an event no
# run waits for starts no run either (`when` is false), so its identity is consumed as suppressed.
REPLIES = """
name: {name}
on:
  http.request: {{path: /hooks/replies}}
  as: reply
  when: "{{{{ reply.method == 'PUT' }}}}"
"""


def reply(delivery_id: str, thread: str, text: str = "hi", **body: Any) -> dict[str, Any]:
    return {"delivery_id": delivery_id, "method": "POST", "body": {"thread": thread, "text": text, **body}}
