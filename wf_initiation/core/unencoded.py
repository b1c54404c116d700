"""Deliveries that reach an activation without the team's payload codec (docs/wire.md, "Payload encoding").

A bridge that forgets the team's codec sends its deliveries in plaintext, and Temporal writes them
to the activation's history as they came. The worker's codec cannot tell: it leaves what it cannot
decode as it is. So the plugin wraps the worker's codec (``wf_initiation.plugin.worker_data_converter``)
and puts :data:`FLAG` in the metadata of every payload that reached the worker neither decoded by the
codec nor as the codec itself would have left it (a codec that compresses only large payloads
leaves a small one as it is: that one is in the team's encoding). The activation's delivery handlers
read the flag and act on the deployment's ``temporal.unencoded``, carried in the spec:

- ``refuse`` (the default of a deployment that declares a codec): an update is rejected by its
  validator, so its plaintext never enters history; a signal, already in history when its sender
  was answered, is recorded as refused and not taken, and nothing of its payload is kept;
- ``record``: taken as ever, and recorded as an initiation error naming the entry and delivery id;
- ``accept`` (the default without a codec, and of every spec recorded before this setting): as ever.

A worker without a codec flags nothing: there is nothing to tell apart.
"""

from __future__ import annotations

from typing import Literal

Unencoded = Literal["refuse", "record", "accept"]

FLAG = "wfi-unencoded"
"""Metadata key the worker's codec wrapper sets (to ``b"1"``) on a payload that reached it without
the team's encoding. Only the worker sets it: one a sender put there is removed on decode."""

REFUSED = "unencoded_refused"
"""The error kind (and counter) of a delivery refused for arriving without the team's codec."""
RECORDED = "unencoded"
"""The error kind (and counter) of one taken although it arrived without the team's codec (``record``)."""

FIX = ("send it through the team's payload codec (in your SDK's data converter, as every Python client of "
       "wf-initiation does; docs/wire.md, \"Payload encoding: use the team's codec\", or `wfi help wire`)")


def default(declares_codec: bool) -> Unencoded:
    """What a deployment that does not set ``temporal.unencoded`` chooses."""
    return "refuse" if declares_codec else "accept"


def refusal(what: str, *, in_history: bool) -> str:
    """The answer to a refused ``what`` (``the deliver update``, ``a deliver_signal``); ``in_history``:
    whether Temporal wrote it to history before the activation saw it (a signal)."""
    kept = ("it is in the activation's history as sent, and was not taken" if in_history
            else "nothing was recorded, nor written to history")
    return (f"{what} arrived without the team's payload codec, in plaintext, and this activation refuses unencoded "
            f"deliveries (temporal.unencoded: refuse): {kept}; {FIX}, and send it again")


def recorded(what: str) -> str:
    """The initiation error of ``what`` taken although unencoded (``temporal.unencoded: record``)."""
    return (f"{what} arrived without the team's payload codec: its payload is in the activation's history in "
            f"plaintext. It was taken (temporal.unencoded: record); {FIX}")
