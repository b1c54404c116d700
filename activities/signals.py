"""Reading signalled deliveries back from an activation run's history (``SignalRef``).

A signal's sender was told it is durable. The activation keeps the signals it cannot take now
without their payloads: a reference (entry, delivery id, payload digest, the run whose history
holds the signal). Temporal keeps that history while the activation runs and, once the run has
continued as new, for the namespace's retention; the payload is found there again by entry and
digest. Two readers: the ``wfi.recover_signals`` activity, with which a new run takes the signals
its previous run left waiting (workflows/_carried.py), and a re-drive (``wf_initiation/_redrive.py``:
``wfi operate redrive``, ``wfi deliver --redrive``), which sends a deferred one's payload with the
operator action that offers it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field
from temporalio import activity
from temporalio.client import Client

from wf_initiation.core.engine import SignalRef, payload_digest
from wf_initiation.wire import DEFERRED_SIGNALS_QUERY, DELIVER_SIGNAL, DeliveryRequest

RECOVER_SIGNALS_ACTIVITY = "wfi.recover_signals"
__all__ = ["DEFERRED_SIGNALS_QUERY", "RECOVER_SIGNALS_ACTIVITY", "RecoverRequest", "SignalActivities", "signalled_requests"]


class RecoverRequest(BaseModel):
    """Signals to read back from history: each from its own run of workflow ``workflow_id``."""

    workflow_id: str
    refs: list[SignalRef] = Field(description="In the order they are to be taken.")


async def signalled_requests(client: Client, workflow_id: str, refs: Sequence[SignalRef]) -> list[DeliveryRequest | None]:
    """The signalled requests ``refs`` name, read from their runs' histories (None: not found there,
    e.g. the run is past the namespace's retention)."""
    found: dict[str, dict[tuple[str | None, str], DeliveryRequest]] = {}
    for run_id in dict.fromkeys(r.run_id for r in refs):
        found[run_id] = await _signals_of(client, workflow_id, run_id)
    return [_match(found[r.run_id], r) for r in refs]


def _match(signals: dict[tuple[str | None, str], DeliveryRequest], ref: SignalRef) -> DeliveryRequest | None:
    return signals.get((ref.entry, ref.digest)) or signals.get((None, ref.digest))


async def _signals_of(client: Client, workflow_id: str, run_id: str) -> dict[tuple[str | None, str], DeliveryRequest]:
    """Every decodable ``deliver_signal`` of one run, by (entry as sent, payload digest); the first wins."""
    out: dict[tuple[str | None, str], DeliveryRequest] = {}
    async for event in client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history_events():
        if not event.HasField("workflow_execution_signaled_event_attributes"):
            continue
        attrs = event.workflow_execution_signaled_event_attributes
        if attrs.signal_name != DELIVER_SIGNAL or not attrs.input.payloads:
            continue
        try:
            [request] = await client.data_converter.decode(list(attrs.input.payloads), [DeliveryRequest])
        except Exception:  # noqa: BLE001 - a signal the activation itself recorded as invalid: never kept
            continue
        out.setdefault((request.entry, payload_digest(request.payload)), request)
    return out


class SignalActivities:
    """The recovery activity, bound to the worker's client (its data converter decodes the history)."""

    def __init__(self, client: Client):
        self._client = client

    @activity.defn(name=RECOVER_SIGNALS_ACTIVITY)
    async def recover(self, request: RecoverRequest) -> list[DeliveryRequest | None]:
        """The requests of ``request.refs``, in order (None for one not found)."""
        return await signalled_requests(self._client, request.workflow_id, request.refs)

    def all(self) -> Sequence[Any]:
        return [self.recover]

