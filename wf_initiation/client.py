"""Client API: activate Workfiles, deliver events, read state, steer activations.

    wfi = WfiClient(await Client.connect("localhost:7233", data_converter=pydantic_data_converter))
    await wfi.activate(spec)
    result = await wfi.deliver("support-triage", {"message_id": "m-1", ...}, entry="message")

Deliveries by update return the disposition once it is durable (EXT-8). The server admits only a
few updates in flight per workflow; a refused caller is retried with the *same* update id, so a
retry can never be applied twice, and callers never see the limit. Transport errors around a server
restart are retried the same way.

Before anything is sent, a payload must be a plain JSON value within ``core.limits`` (size, depth,
finite numbers: NaN would otherwise silently become something else on the way); ``DeliveryRefused``
says why not. Update ids are bound to their content: a caller's ``update_id`` (or an operator's
``action_id``) reused with different content is a different update, which the activation judges on
its own (a delivery id with another payload is a ``conflict``; a reused action id is refused),
instead of the server answering with the first update's result.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import pathlib
import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    RPCError,
    RPCTimeoutOrCancelledError,
    WithStartWorkflowOperation,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.api.enums.v1 import EventType
from temporalio.api.errordetails.v1 import QueryFailedFailure
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCStatusCode

from wf_initiation._temporal import is_namespace_not_found
from wf_initiation._codec import CodecError, history_problem, is_unknown_encoding, unknown_encoding_message
from wf_initiation.core._catalog import Catalog
from wf_initiation.core._diagnostics import DiagnosticError
from wf_initiation.core._expr import canonical_key
from wf_initiation.core._validate import load_workfile
from wf_initiation.core.activation import ActivationSpec, build_activation
from wf_initiation.core.deployment import DEFAULT_TASK_QUEUE, Deployment, load_deployment
from wf_initiation.core.engine import DeliveryResult
from wf_initiation.core.engine.operator import content_digest, request_problem
from wf_initiation.core.limits import MAX_ACTION_ID_CHARS, MAX_BULK_BYTES, json_problem, json_size
from wf_initiation.wire import (
    ACTIVATE_UPDATE, DEACTIVATE_UPDATE, DELIVER_MANY_UPDATE, DELIVER_UPDATE, MAX_BULK, MAX_DELIVERY_BYTES, OPERATE_UPDATE,
    DeactivatedResult, DeactivateRequest, DeactivateResult,
    REBINDING, STALE_ACTIVATION, DeliveryRequest, OperatorAction, OperatorRequest, OperatorResult, as_action,
    workflow_id_for,
)
from wf_initiation.workflows.activation import ActivationWorkflow

_T = TypeVar("_T")

_RETRYABLE = {RPCStatusCode.RESOURCE_EXHAUSTED, RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED,
              RPCStatusCode.ABORTED}


_TRANSPORT = ("transport error", "connection refused", "connection reset", "broken pipe", "error trying to connect",
              "tcp connect error", "h2 protocol error", "connection closed")


def _retryable(exc: RPCError) -> bool:
    # The update limit (RESOURCE_EXHAUSTED), a restarting server, and an update that met a failed
    # or rejected workflow task (e.g. at a continue-as-new) are all transient: retry with the same id.
    if exc.status in _RETRYABLE:
        return True
    if is_transport_error(exc) or is_call_timeout(exc):
        return True
    return exc.status == RPCStatusCode.FAILED_PRECONDITION and b"WorkflowNotReady" in (exc.raw_grpc_status or b"")


def is_transport_error(exc: RPCError) -> bool:
    """The connection to the server failed (it is restarting): the call may not have arrived."""
    text = str(exc.message).lower()
    return exc.status in (RPCStatusCode.UNKNOWN, RPCStatusCode.UNAVAILABLE, RPCStatusCode.CANCELLED,
                          RPCStatusCode.INTERNAL) and any(t in text for t in _TRANSPORT)


def is_call_timeout(exc: RPCError) -> bool:
    """The call's own deadline passed before the server answered (the SDK reports it as CANCELLED,
    "Timeout expired"): a query to a busy worker, for one. Every call retried on it is idempotent
    (reads, updates and signals by id)."""
    return exc.status == RPCStatusCode.CANCELLED and "timeout expired" in str(exc.message).lower()


def query_failure_type(exc: WorkflowQueryFailedError) -> str | None:
    """The failure type of a failed query, as the worker reported it (the server passes it on in the
    error's ``QueryFailedFailure`` detail), or None when it carries none."""
    rpc = exc.__cause__ or exc.__context__
    if not isinstance(rpc, RPCError):
        return None
    for detail in rpc.grpc_status.details:
        failure = QueryFailedFailure()
        if detail.Unpack(failure) and failure.HasField("failure"):
            return failure.failure.application_failure_info.type or None
    return None


def _cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class DeliveryRefused(ValueError):
    """A delivery refused before sending: the message says why and what to send instead."""


class DeliveryTooLarge(DeliveryRefused):
    pass


def build_spec(workfile_path: str | pathlib.Path, deployment: Deployment, catalog: Catalog | None = None) -> ActivationSpec:
    """Validate a Workfile, check the deployment claims its capabilities (CAP-7), resolve bindings."""
    catalog = catalog or Catalog.default()
    result = load_workfile(pathlib.Path(workfile_path), catalog=catalog)
    if result.workfile is None:
        raise DiagnosticError(result.diagnostics)
    return build_activation(result.workfile, deployment, catalog)  # what `wfi validate --deployment` checks


def spec_from_files(workfile_path: str | pathlib.Path, deployment_path: str | pathlib.Path) -> tuple[ActivationSpec, Deployment]:
    deployment = load_deployment(deployment_path)
    return build_spec(workfile_path, deployment), deployment


def update_id_for(entry: str | None, payload: Any) -> str:
    """Same delivery, same id: a retried delivery is deduplicated by the server within one run."""
    try:
        body = canonical_key(payload)
    except Exception:
        body = repr(payload)
    return "dlv-" + hashlib.sha256(f"{entry}\x1f{body}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def bound_update_id(update_id: str, entry: str | None, payload: Any) -> str:
    """A caller's update id bound to the delivery's content: the same id with another payload is
    another update (the activation then answers ``conflict`` or ``duplicate`` by delivery id)."""
    if len(update_id) > MAX_ACTION_ID_CHARS:
        raise DeliveryRefused(f"the update id has {len(update_id)} characters; the limit is {MAX_ACTION_ID_CHARS}")
    return f"{update_id}~{update_id_for(entry, payload)[4:20]}"


def _check_size(payload: Any) -> int:
    """Refuse a payload that is not plain JSON within the limits; return its size in bytes."""
    problem = json_problem(payload)
    if problem is not None:
        raise DeliveryRefused(f"the payload cannot be delivered: {problem}")
    size = json_size(payload)
    if size > MAX_DELIVERY_BYTES:
        raise DeliveryTooLarge(
            f"payload is {size} bytes; the limit is {MAX_DELIVERY_BYTES} (Temporal payload limits): "
            "send a reference (URL, object key) instead of the content"
        )
    return size


def bulk_chunks(deliveries: list[tuple[str | None, Any]]) -> list[list[DeliveryRequest]]:
    """Split deliveries into ``deliver_many`` updates of at most MAX_BULK each and MAX_BULK_BYTES."""
    chunks: list[list[DeliveryRequest]] = [[]]
    size = 0
    for entry, payload in deliveries:
        n = _check_size(payload) + len(entry or "") + 64
        if chunks[-1] and (len(chunks[-1]) >= MAX_BULK or size + n > MAX_BULK_BYTES):
            chunks.append([])
            size = 0
        chunks[-1].append(DeliveryRequest(entry=entry, payload=payload))
        size += n
    return [c for c in chunks if c]


Outcome = Literal["activated", "unchanged", "rebound"]


class Activation(BaseModel):
    """What :meth:`WfiClient.activate` did, in the words ``wfi activate`` prints."""

    workflow: str = Field(description="The workflow identity (the Workfile's name).")
    activation_id: str = Field(description="The activation id now serving it (the binding hash).")
    outcome: Outcome = Field(description="activated: it was not running and now is; unchanged: it already ran this "
                             "binding; rebound: it ran another binding, which this one replaced.")
    previous: list[str] = Field(default_factory=list, description="Earlier activation ids of this workflow, oldest first.")
    note: str | None = Field(default=None, description="After a run that ended without deactivation (terminated, "
                             "failed, timed out): what was carried into the new run and what was lost.")


class _ActivateAnswer(BaseModel):
    """The ``activate`` update's result as any build of the activation words it: ``current`` (recorded
    by earlier builds), ``unchanged``, ``activated`` or ``rebound``."""

    activation_id: str
    outcome: str
    previous: list[str] = Field(default_factory=list)


def _outcome(answer: _ActivateAnswer, was_running: bool) -> Outcome:
    if not was_running:
        return "activated"
    return "rebound" if answer.outcome == "rebound" else "unchanged"


def _recorded(events: Sequence[Any]) -> str:
    """What outsiders sent a run, in words: ``3 delivery update(s), 1 signal(s) and 0 operator action(s)``."""
    counts: Counter[str] = Counter()
    for event in events:
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
            name = event.workflow_execution_update_accepted_event_attributes.accepted_request.input.name
            counts["deliveries" if name in (DELIVER_UPDATE, DELIVER_MANY_UPDATE) else
                   "actions" if name in (OPERATE_UPDATE, DEACTIVATE_UPDATE) else "other"] += 1
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            counts["signals"] += 1
    return (f"the {counts['deliveries']} delivery update(s), {counts['signals']} signal(s) and "
            f"{counts['actions']} operator action(s)")


class WfiClient:
    """Thin, typed wrapper over a Temporal client for wf-initiation operations."""

    def __init__(
        self, client: Client, *, task_queue: str = DEFAULT_TASK_QUEUE, max_attempts: int = 60,
        update_timeout: timedelta = timedelta(seconds=20),
    ):
        self.client = client
        self.task_queue = task_queue
        self.max_attempts = max_attempts
        # An update only admitted when the server restarted is lost: the caller must time out and
        # retry with the same update id.
        self.update_timeout = update_timeout
        self._codec_checked: set[str] = set()

    async def _check_codec(self, workflow: str) -> None:
        """Before the first call about ``workflow``: refuse when its history was written through a
        codec this client lacks or cannot decode with (nothing may be added in plaintext to an
        encrypted history); once per workflow and client."""
        if workflow in self._codec_checked:
            return
        problem = await self._retry(lambda: history_problem(self.client, workflow_id_for(workflow)))
        if problem is not None:
            raise CodecError(problem)
        self._codec_checked.add(workflow)

    def handle(self, workflow: str) -> WorkflowHandle[Any, Any]:
        return self.client.get_workflow_handle_for(ActivationWorkflow.run, workflow_id_for(workflow))

    async def activate(self, spec: ActivationSpec) -> Activation:
        """Start the activation, or rebind it when the binding hash changed; idempotent (INIT-4).

        A deactivated activation is started again from its final state; one that was terminated,
        failed, timed out or cancelled is started again from the state its last run began with, and
        what that run recorded after its start is named in the result's ``note`` (docs/lifecycle.md)."""
        await self._check_codec(spec.workflow)
        before = await self._latest(spec.workflow)
        start_args: list[Any] = [spec, None]
        update_id, note = f"activate-{spec.activation_id}", None
        if before is not None and before.status == WorkflowExecutionStatus.COMPLETED:
            carried = await self._final_state(spec.workflow, before.run_id)
            start_args = [spec, carried]
            # The server answers an update-with-start from a closed run that had the same update id:
            # a re-activation needs an id of its own (stable for retries of the same re-activation).
            update_id += f"-{hashlib.sha256(carried).hexdigest()[:16]}"
        elif before is not None and before.status != WorkflowExecutionStatus.RUNNING:
            start_args, note = await self._restart_from(before, spec)
            update_id += f"-after-{before.run_id}"

        def start() -> WithStartWorkflowOperation:  # an operation object is single-use: one per attempt
            return WithStartWorkflowOperation(
                ActivationWorkflow.run, args=start_args, id=workflow_id_for(spec.workflow), task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                static_summary=f"wf-initiation activation of {spec.workflow}", static_details=note,
            )

        answer = await self._retry(lambda: self.client.execute_update_with_start_workflow(
            ACTIVATE_UPDATE, spec, start_workflow_operation=start(), id=update_id, result_type=_ActivateAnswer,
            rpc_timeout=self.update_timeout,
        ))
        running = before is not None and before.status == WorkflowExecutionStatus.RUNNING
        return Activation(workflow=spec.workflow, activation_id=answer.activation_id, outcome=_outcome(answer, running),
                          previous=answer.previous, note=note)

    async def _latest(self, workflow: str) -> Any:
        """The description of the activation's latest run, or None when it never ran."""
        try:
            return await self._retry(self.client.get_workflow_handle(workflow_id_for(workflow)).describe)
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND and not is_namespace_not_found(exc):
                return None
            raise

    async def _final_state(self, workflow: str, run_id: str) -> bytes:
        closed = self.client.get_workflow_handle(workflow_id_for(workflow), run_id=run_id, result_type=DeactivatedResult)
        result = await self._retry(lambda: closed.result(follow_runs=False))
        return result.state

    async def _restart_from(self, closed: Any, spec: ActivationSpec) -> tuple[list[Any], str]:
        """The arguments of a new run after ``closed`` ended without a deactivation (terminated,
        failed, timed out, cancelled): its spec and the state it began with (what its previous run
        carried, or none for a first run), and a note of what is not carried."""
        history = await self._retry(self.client.get_workflow_handle(closed.id, run_id=closed.run_id).fetch_history)
        started = history.events[0].workflow_execution_started_event_attributes
        status = closed.status.name.lower().replace("_", " ") if closed.status else "closed"
        when = closed.close_time.isoformat(timespec="seconds") if closed.close_time else "an unknown time"
        lost = (f"{_recorded(history.events[1:])} that run recorded after its start are not carried: their dedup "
                "entries, cursor moves and schedule progress are lost (a repeated delivery may be accepted again, "
                "but under the run key it had, so it starts no second run)")
        try:
            payloads = list(started.input.payloads)
            hints: list[type] = [ActivationSpec, bytes]
            began, state = [*await self.client.data_converter.decode(payloads, hints[:len(payloads)]), None][:2]
        except Exception as exc:  # e.g. a spec of a build this one cannot read: start afresh, and say so
            return [spec, None], (f"re-activated after run {closed.run_id} was {status} at {when}; its state could not be "
                                  f"read ({type(exc).__name__}), so nothing it had accepted is carried")
        begun = "the state carried into it" if state else "a new activation's state (it was the first run)"
        return [began, state], f"re-activated after run {closed.run_id} was {status} at {when}, from {begun}; {lost}"

    async def deliver(self, workflow: str, payload: Any, *, entry: str | None = None, update_id: str | None = None) -> DeliveryResult:
        _check_size(payload)
        uid = bound_update_id(update_id, entry, payload) if update_id else update_id_for(entry, payload)
        await self._check_codec(workflow)
        handle = self.handle(workflow)
        # The handlers take their argument raw (they decode it themselves, docs/limits.md), so the
        # method's parameter type is RawValue while a client sends the request model.
        return await self._retry(lambda: handle.execute_update(
            ActivationWorkflow.deliver, DeliveryRequest(entry=entry, payload=payload), id=uid,  # type: ignore[arg-type]
            rpc_timeout=self.update_timeout))

    async def deliver_many(self, workflow: str, deliveries: list[tuple[str | None, Any]]) -> list[DeliveryResult]:
        """Many deliveries in as few updates as possible (each carries up to MAX_BULK and MAX_BULK_BYTES).

        Every payload is checked before the first update is sent (``DeliveryRefused``)."""
        out: list[DeliveryResult] = []
        handle = self.handle(workflow)
        chunks = bulk_chunks(deliveries)
        await self._check_codec(workflow)
        for chunk in chunks:
            uid = "bulk-" + hashlib.sha256("".join(update_id_for(r.entry, r.payload) for r in chunk).encode()).hexdigest()[:32]
            send = functools.partial(handle.execute_update, ActivationWorkflow.deliver_many, chunk, id=uid,
                                     rpc_timeout=self.update_timeout)
            out.extend(await self._retry(send))
        return out

    async def signal_delivery(self, workflow: str, payload: Any, *, entry: str | None = None) -> None:
        """Fire-and-forget delivery; durable when this returns; disposition via :meth:`delivery`."""
        _check_size(payload)
        request = DeliveryRequest(entry=entry, payload=payload)
        await self._check_codec(workflow)
        await self._retry(lambda: self.handle(workflow).signal(ActivationWorkflow.deliver_signal, request))  # type: ignore[call-overload]

    async def operate(self, workflow: str, request: OperatorRequest | OperatorAction) -> OperatorResult:
        """Apply an operator action: ``OperatorRequest(action="pause")``, or one action's model (``Pause()``,
        ``SetCursor(entry=..., cursor=...)``, see ``wf_initiation.wire``)."""
        # Every action gets an id, so a retried call (timeout, restart) is applied once (engine dedup).
        # The update id also carries the content's digest: the same action id with another content
        # reaches the activation, which refuses it, instead of the server replaying the first result.
        action = as_action(request)
        request = OperatorRequest(action.model_copy(update={"action_id": action.action_id or f"cli-{uuid.uuid4().hex}"}))
        problem = request_problem(request)
        if problem is not None:
            return OperatorResult(ok=False, message=f"refused before sending: {problem}", action_id=request.action_id)
        uid = f"op-{request.action_id}~{content_digest(request)}"
        await self._check_codec(workflow)
        return await self._retry(lambda: self.handle(workflow).execute_update(
            ActivationWorkflow.operate, request, id=uid, rpc_timeout=self.update_timeout))

    async def deactivate(self, workflow: str, request: DeactivateRequest) -> DeactivateResult:
        """Deactivate an activation (docs/lifecycle.md): refuse deliveries, stop schedules and polls,
        settle queued work; the workflow completes once settled (``handle(workflow).result()``)."""
        request = request.model_copy(update={"action_id": request.action_id or f"cli-{uuid.uuid4().hex}"})
        await self._check_codec(workflow)
        return await self._retry(lambda: self.handle(workflow).execute_update(
            ActivationWorkflow.deactivate, request, id=f"deactivate-{request.action_id}", rpc_timeout=self.update_timeout))

    async def deactivated_state(self, workflow: str) -> bytes | None:
        """The final state of a deactivated (completed) activation, else None (running, never started,
        or closed another way: terminated, failed)."""
        latest = await self._latest(workflow)
        if latest is None or latest.status != WorkflowExecutionStatus.COMPLETED:
            return None
        return await self._final_state(workflow, latest.run_id)

    async def state(self, workflow: str, *, include_events: bool = False, settle: int = 3) -> dict[str, Any]:
        """Full state; with ``include_events`` also every dedup entry (paged queries) under ``events``.

        The entries take more queries than the state, so the two are read at different moments. They
        are read state first, so the entries always include every disposition the state refers to
        (a cursor never looks ahead of its items, POLL-8). With ``settle`` > 1 the state is read again
        after the entries, up to ``settle`` times, until nothing moved in between, so that the entries
        are not ahead of the state either; under traffic that never pauses the first combination is
        returned. ``settle=1`` is one state read and one pass over the entries.
        """
        await self._check_codec(workflow)
        query = lambda: self._retry(lambda: self.handle(workflow).query(ActivationWorkflow.state))  # noqa: E731
        state = await query()
        if include_events:
            events = {e["key"]: e async for e in self.events(workflow)}
            for _ in range(settle - 1):  # every (state, events) pair here was read state first
                after = await query()
                if after == state:
                    break
                state, events = after, {e["key"]: e async for e in self.events(workflow)}
            state["events"] = events
        await self._real_status(workflow, state.get("summary"))
        return state

    async def events(self, workflow: str, *, page: int = 500) -> AsyncIterator[dict[str, Any]]:
        """Every dedup entry in acceptance order, fetched in pages."""
        await self._check_codec(workflow)
        after = 0
        while True:
            fetch = functools.partial(self.handle(workflow).query, ActivationWorkflow.events, args=[after, page])
            chunk = await self._retry(fetch)
            for event in chunk:
                yield event
            if len(chunk) < page:
                return
            after = chunk[-1]["seq"]

    async def summary(self, workflow: str) -> dict[str, Any]:
        await self._check_codec(workflow)
        summary = await self._retry(lambda: self.handle(workflow).query(ActivationWorkflow.summary_query))
        await self._real_status(workflow, summary)
        return summary

    async def _real_status(self, workflow: str, summary: dict[str, Any] | None) -> None:
        """A closed activation workflow answers queries with the state it ended in, which says nothing
        of its end: when it was terminated, failed, timed out or cancelled, ``status`` says so and
        ``closed`` says when (``wfi activate`` starts it again)."""
        latest = await self._latest(workflow)
        if summary is None or latest is None or latest.status in (WorkflowExecutionStatus.RUNNING,
                                                                   WorkflowExecutionStatus.COMPLETED, None):
            return
        summary["status"] = latest.status.name.lower()
        summary["closed"] = {"status": summary["status"], "run_id": latest.run_id,
                             "at": latest.close_time.isoformat() if latest.close_time else None}

    async def delivery(self, workflow: str, entry: str, delivery_id: str) -> dict[str, Any] | None:
        await self._check_codec(workflow)
        return await self._retry(lambda: self.handle(workflow).query(ActivationWorkflow.delivery, args=[entry, delivery_id]))

    async def _retry(self, call: Callable[[], Awaitable[_T]]) -> _T:
        delay = 0.05
        for attempt in range(self.max_attempts):
            try:
                return await call()
            except RPCError as exc:
                if not _retryable(exc) or attempt == self.max_attempts - 1 or _cancelling():
                    raise
            except RPCTimeoutOrCancelledError:
                # The SDK turns a cancellation of the call into this error: a caller's timeout
                # (asyncio.wait_for) must end the call as cancelled, not be retried.
                if _cancelling():
                    raise asyncio.CancelledError() from None
                if attempt == self.max_attempts - 1:
                    raise
            except WorkflowUpdateFailedError as exc:
                cause = getattr(exc.cause, "type", None)
                if cause != REBINDING or attempt == self.max_attempts - 1:
                    raise
            except KeyError as exc:
                if is_unknown_encoding(exc):  # an answer written through a codec this client lacks
                    raise CodecError(unknown_encoding_message(exc, "the activation's answer")) from None
                raise
            except WorkflowQueryFailedError as exc:
                # A query that reached a restarted worker with events it must not decide on yet
                # (workflows/_fresh.py): the worker replays the run at its next task; ask again.
                if query_failure_type(exc) != STALE_ACTIVATION or attempt == self.max_attempts - 1:
                    raise
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")
