"""Client API: activate Workfiles, deliver events, read state, steer activations (docs/client.md).

    wfi = await WfiClient.connect("deployment.yaml")       # as `wfi` connects, the team's codec included
    activation = await wfi.activate(activation_spec("support-triage.yaml", "deployment.yaml"))
    result = await wfi.deliver("support-triage", {"message_id": "m-1", ...}, entry="message")

Deliveries by update return the disposition once it is durable (EXT-8). The server admits only a
few updates in flight per workflow; a refused caller is retried with the *same* update id, so a
retry can never be applied twice, and callers never see the limit. Transport errors around a server
restart are retried the same way. Every error a method raises is a :class:`wf_initiation.errors.WfiError`
(Temporal's own error is its ``__cause__``): ``type`` names it, ``retryable`` says whether the same
call may succeed later.

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
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from pydantic import BaseModel, Field
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from wf_initiation import _redrive
from wf_initiation._activating import activate_shard
from wf_initiation._activating import update_id as activate_update_id
from wf_initiation._codec import discard_started, first_activation_problem, history_problem
from wf_initiation._delivery import bound_update_id, bulk_chunks, cancelling, check_size, update_id_for
from wf_initiation._ended import answer_from_history
from wf_initiation._from_temporal import from_temporal
from wf_initiation._grouping import DeliveryGroups
from wf_initiation._joined import Joined
from wf_initiation._reactivation import Outcome, outcome
from wf_initiation._recovery import Recovery, recover, shards_not_running
from wf_initiation._sharded_client import ROUTING_ATTEMPTS, ShardedCalls
from wf_initiation._shards import RoutingCache
from wf_initiation.core.activation import ActivationSpec
from wf_initiation.core.deployment import DEFAULT_TASK_QUEUE, Deployment, load_deployment
from wf_initiation.core.engine import DeliveryResult
from wf_initiation.core.engine.operator import content_digest, request_problem
from wf_initiation.errors import (
    ActivationNotFound,
    CodecError,
    DeliveryRefused,
    DeliveryTooLarge,
    DiagnosticError,
    StaleAnswer,
    TemporalUnavailable,
    WfiError,
)
from wf_initiation.specs import activation_spec, build_spec, spec_from_files  # defined there; importable here as before
from wf_initiation.wire import (
    DELIVER_SIGNAL,
    OPERATE_UPDATE,
    STATE_QUERY,
    DeactivatedResult,
    DeactivateRequest,
    DeactivateResult,
    DeliveryRequest,
    OperatorAction,
    OperatorRequest,
    OperatorResult,
    Redrive,
    as_action,
    shard_workflow_id,
    workflow_id_for,
)

__all__ = [
    "Activation", "DeliveryRefused", "DeliveryTooLarge", "DiagnosticError", "Outcome", "TemporalUnavailable", "WfiClient",
    "activation_spec", "bound_update_id", "build_spec", "bulk_chunks", "spec_from_files", "update_id_for",
]

_T = TypeVar("_T")

# Asked this many times before a stale answer is checked against the run's status (a closed run's
# stays stale; wf_initiation/_ended.py).
STALE_PROBES = 2


class Activation(BaseModel):
    """What :meth:`WfiClient.activate` did, in the words ``wfi activate`` prints."""

    workflow: str = Field(description="The workflow identity (the Workfile's name).")
    activation_id: str = Field(description="The activation id now serving it (the binding hash).")
    outcome: Outcome = Field(description="activated: it was not running and now is; unchanged: it already ran this "
                             "binding; rebound: it ran another binding, which this one replaced.")
    previous: list[str] = Field(default_factory=list, description="Earlier activation ids of this workflow, oldest first.")
    note: str | None = Field(default=None, description="After a run that ended without deactivation (terminated, "
                             "failed, timed out): what was carried into the new run and what was lost.")


class WfiClient:
    """Activate Workfiles, deliver events, steer and read activations: what ``wfi`` does, from Python.

    Every call retries what is transient (the server's limit of updates in flight, a restarting
    server, a busy worker) with the same update id, so a retry is never applied twice. Before its
    first call about a workflow it checks that the client's codec matches the activation's history
    (docs/plugin.md, "With an encrypting codec"). Example: docs/client.md.

    Every method raises only :class:`wf_initiation.errors.WfiError` subclasses (Temporal's own error
    kept as ``__cause__``): besides those each names, ``ActivationNotFound`` when no activation of
    the workflow runs, ``TemporalError`` when Temporal refuses a call (``TemporalUnavailable`` and
    ``CallTimeout`` once the retries ran out), ``CodecError`` when the client's codec does not match.

    Args:
        client: A connected ``temporalio.client.Client`` whose data converter carries pydantic
            models (``Client.connect(..., plugins=[WfiPlugin()])``, or the pydantic data converter),
            with the team's payload codec if it has one. :meth:`connect` makes one from a deployment.
        task_queue: Where activation workflows run: the deployment's ``temporal.task_queue``, a
            queue a worker with ``WfiPlugin`` serves.
        max_attempts: How often a transient failure is retried before it is raised.
        update_timeout: How long one update call waits for the server before it is retried with the
            same id (an update only admitted when the server restarted is lost).
        group_deliveries: Send concurrent :meth:`deliver` calls to one activation together, as
            ``deliver_many`` updates (``wf_initiation/_grouping.py``): many more deliveries per second
            from many concurrent callers (a webhook bridge); each caller still gets its own result,
            once durable. A retry of a grouped delivery is answered ``duplicate`` rather than with its
            first answer. Calls with an explicit ``update_id`` are never grouped.
        group_window: How long a delivery waits for others when no update of its activation is in flight
            (only while the activation has company: a lone caller's deliveries go at once).
        groups_in_flight: Grouped updates out at once per activation.
    """

    def __init__(
        self, client: Client, *, task_queue: str = DEFAULT_TASK_QUEUE, max_attempts: int = 60,
        update_timeout: timedelta = timedelta(seconds=20), group_deliveries: bool = False,
        group_window: timedelta = timedelta(milliseconds=2), groups_in_flight: int = 1,
    ) -> None:
        self.client = client
        self.task_queue = task_queue
        self.max_attempts = max_attempts
        self._shards = ShardedCalls(self)  # the client's side of the routing boundary (core.routing)
        self._groups = DeliveryGroups(self._shards.send_grouped, self._shards.send_alone, window=group_window.total_seconds(),
                                      in_flight=groups_in_flight) if group_deliveries else None
        self._routing = RoutingCache(self._shards.ask_routing, self._shards.has_shards)
        # An update only admitted when the server restarted is lost: the caller must time out and
        # retry with the same update id.
        self.update_timeout = update_timeout
        self._codec_checked: set[str] = set()
        self._codec_checks: Joined[str | None] = Joined()

    async def _check_codec(self, workflow: str) -> None:
        """Before the first call about ``workflow``: refuse when its history was written through a
        codec this client lacks or cannot decode with (nothing may be added in plaintext to an
        encrypted history); once per workflow and client."""
        if workflow in self._codec_checked:
            return
        problem = await self._codec_checks(workflow, lambda: self._retry(
            lambda: history_problem(self.client, workflow_id_for(workflow)), workflow=workflow))  # callers at once: one read
        if problem is not None:
            raise CodecError(problem)
        self._codec_checked.add(workflow)

    @classmethod
    async def connect(cls, deployment: str | pathlib.Path | Deployment, **options: Any) -> WfiClient:
        """Connect as the ``wfi`` commands do for ``deployment``: its Temporal target, with the
        ``TEMPORAL_*`` variables and the config file's profile over it, its task queue, and the
        team's codec (``temporal.data_converter`` / ``temporal.codec_endpoint``, or
        ``TEMPORAL_CODEC_ENDPOINT``).

        Args:
            deployment: The deployment file's path, or a loaded :class:`Deployment`.
            **options: ``max_attempts`` or ``update_timeout`` (see the class).

        Returns:
            A client for that deployment's activations.

        Raises:
            DiagnosticError: the deployment file is not valid (``.diagnostics`` says where).
            TemporalUnavailable: Temporal cannot be reached, or the codec cannot be loaded; the
                message names the fix.
        """
        from wf_initiation import _temporal

        loaded = deployment if isinstance(deployment, Deployment) else load_deployment(deployment)
        return cls(await _temporal.connect(loaded), task_queue=loaded.temporal.task_queue, **options)

    def _handle(self, workflow: str, shard: int = 0) -> WorkflowHandle[Any, Any]:
        """The Temporal handle of the activation workflow (or of its shard) for the client's own calls,
        which go through :meth:`_retry` so that only ``WfiError`` leaves a public method."""
        return self.client.get_workflow_handle(shard_workflow_id(workflow, shard), result_type=DeactivatedResult)

    async def activation_status(self, workflow: str) -> str:
        """How the activation workflow's latest run stands, in Temporal's words: ``running``,
        ``completed`` (deactivated), ``terminated``, ``failed``, ``timed_out``, ``canceled``, ...

        Args:
            workflow: The workflow identity (the Workfile's ``name``).

        Returns:
            The status of its shard 0's latest run, lowercased.

        Raises:
            ActivationNotFound: the workflow was never activated (or its history is past retention).
        """
        latest = await self._latest(workflow)
        if latest is None:
            raise ActivationNotFound(f"workflow {workflow!r} has no activation", workflow=workflow)
        return latest.status.name.lower() if latest.status is not None else "unknown"

    async def shards(self, workflow: str) -> int:
        """How many activation workflows an activation spans (its deployment's ``scale.shards``).

        Args:
            workflow: The workflow identity (the Workfile's ``name``).

        Returns:
            1 for an unsharded activation (or one of a build before sharding), else its shard count.
        """
        return (await self._routing.get(workflow)).shards

    async def activate(self, spec: ActivationSpec) -> Activation:
        """Start the activation of ``spec``, or rebind it when its binding changed; idempotent (INIT-4).

        A deactivated (or cancelled: it settles as a deactivation) activation is started again from
        its final state; one that was terminated, failed or timed out from its complete state,
        replayed from its history here (wf_initiation/_recovery.py), the result's ``note`` saying
        what holds (docs/lifecycle.md). One that grew by itself (``scale.grow_at``) past
        ``scale.shards`` keeps the shards it grew to (docs/deployment.md).

        Args:
            spec: The activation spec of one Workfile under one deployment (:func:`activation_spec`).

        Returns:
            What happened: ``activated``, ``unchanged`` or ``rebound``, as ``wfi activate`` says it.

        Raises:
            CodecError: the client's codec does not match the activation's history.
            ActivationRefused: the activation refused the spec (e.g. it is being deactivated).
        """
        await self._check_codec(spec.workflow)
        latest = await self._latest(spec.workflow)
        if latest is not None:  # running, or ended: started again on the shards it had, then split
            self._routing.forget(spec.workflow)
            current = (await self._routing.get(spec.workflow)).shards
            spec = spec.for_running(current)  # one that grew by itself (scale.grow_at) keeps its shards
            if current != spec.shards:
                return await self._shards.split(spec, current)
        elif (problem := await first_activation_problem(self.client, self.task_queue)) is not None:
            raise CodecError(problem)
        try:
            first = await self._activate_shard(spec, 0)
            if spec.shards > 1:  # each shard by its own idempotent update-with-start (core.sharding)
                others = await asyncio.gather(*(self._activate_shard(spec, k) for k in range(1, spec.shards)))
                started = [k for k, a in enumerate(others, start=1) if a.outcome == "activated"]
                if started and first.outcome != "activated":
                    first = first.model_copy(update={"note": f"shard(s) {', '.join(map(str, started))} started again"})
                self._routing.forget(spec.workflow)
        except CodecError as exc:  # a first activation leaves nothing running, nothing in plaintext
            if latest is not None:
                raise
            ended = await discard_started(self.client, [shard_workflow_id(spec.workflow, k) for k in range(spec.shards)])
            raise CodecError(f"{exc}; {ended}") from exc
        return first

    async def _activate_shard(self, spec: ActivationSpec, shard: int) -> Activation:
        wid = shard_workflow_id(spec.workflow, shard)
        spec = spec.as_shard(shard)
        before = await self._latest(spec.workflow, shard)
        start_args: list[Any] = [spec, None]
        update_id, note = activate_update_id(spec, shard), None
        recovery: Recovery | None = None
        if before is not None and before.status == WorkflowExecutionStatus.COMPLETED:
            carried = await self._final_state(spec.workflow, before.run_id, shard)
            start_args = [spec, carried]
            # The server answers an update-with-start from a closed run that had the same update id:
            # a re-activation needs an id of its own (stable for retries of the same re-activation).
            update_id += f"-{hashlib.sha256(carried).hexdigest()[:16]}"
        elif before is not None and before.status != WorkflowExecutionStatus.RUNNING:
            recovery = await self._restart_from(before, spec)
            start_args, note = recovery.args, recovery.note
            update_id += f"-after-{before.run_id}"

        answer = await self._retry(lambda: activate_shard(
            self.client, spec, task_queue=self.task_queue, args=start_args, update=update_id, note=note,
            rpc_timeout=self.update_timeout), workflow=spec.workflow)
        for request in recovery.resend if recovery is not None else []:  # told durable, never taken: again
            await self._retry(functools.partial(self.client.get_workflow_handle(wid).signal, DELIVER_SIGNAL, request),
                              workflow=spec.workflow)
        running = before is not None and before.status == WorkflowExecutionStatus.RUNNING
        return Activation(workflow=spec.workflow, activation_id=answer.activation_id, outcome=outcome(answer, running),
                          previous=answer.previous, note=note)

    async def _latest(self, workflow: str, shard: int = 0) -> Any:
        """The description of the activation's latest run, or None when it never ran."""
        try:
            return await self._retry(self.client.get_workflow_handle(shard_workflow_id(workflow, shard)).describe,
                                     workflow=workflow)
        except ActivationNotFound:
            return None

    async def _final_state(self, workflow: str, run_id: str, shard: int = 0) -> bytes:
        closed = self.client.get_workflow_handle(shard_workflow_id(workflow, shard), run_id=run_id,
                                                 result_type=DeactivatedResult)
        result = await self._retry(lambda: closed.result(follow_runs=False), workflow=workflow)
        return result.state

    async def _restart_from(self, closed: Any, spec: ActivationSpec) -> Recovery:
        history = await self._retry(self.client.get_workflow_handle(closed.id, run_id=closed.run_id).fetch_history,
                                    workflow=spec.workflow)
        return await recover(self.client, closed, history, spec,
                             lambda k: self._query(spec.workflow, STATE_QUERY, shard=k, attempts=ROUTING_ATTEMPTS))

    async def deliver(self, workflow: str, payload: Any, *, entry: str | None = None, update_id: str | None = None) -> DeliveryResult:
        """Deliver one external event by update; returns once its disposition is durable (EXT-8).

        The update id is derived from the entry and the payload, so delivering the same event again
        (a retry after a timeout, or a second process) is answered by the first delivery.

        Args:
            workflow: The workflow identity (the Workfile's ``name``).
            payload: The event, a plain JSON value within the limits of docs/limits.md.
            entry: The trigger entry (its ``as`` name); optional when the Workfile has one external entry.
            update_id: Your own idempotency key instead of the derived one; reused with another
                payload it is another delivery (the activation judges it: ``conflict`` or ``duplicate``).

        Returns:
            The disposition (``accepted``, ``queued``, ``duplicate``, ``suppressed``, ...), the run
            key of the run it started or joined, the delivery id and the activation id.

        Raises:
            DeliveryRefused: the payload is not plain JSON within the limits; nothing was sent.
            CodecError: the client's codec does not match the activation's history.
            ActivationNotFound: no activation of ``workflow`` runs (``ActivationEnded``: its workflow ended).
            TemporalError: Temporal refused the call, or it stayed unavailable through every retry.
        """
        size = check_size(payload)
        await self._check_codec(workflow)
        request = DeliveryRequest(entry=entry, payload=payload)
        grouped = self._groups is not None and update_id is None  # a group's update has an id of its own
        uid = "" if grouped else bound_update_id(update_id, entry, payload) if update_id else update_id_for(entry, payload)
        return await self._shards.deliver(workflow, request, uid=uid, size=size)

    async def deliver_many(self, workflow: str, deliveries: list[tuple[str | None, Any]]) -> list[DeliveryResult]:
        """Many deliveries in as few updates as possible (each carries at most ``MAX_BULK`` deliveries
        and ``MAX_BULK_BYTES``), each judged as :meth:`deliver` judges one.

        Args:
            workflow: The workflow identity (the Workfile's ``name``).
            deliveries: ``(entry, payload)`` pairs, in order (``entry`` may be None as for :meth:`deliver`).

        Returns:
            One result per delivery, in the order given.

        Raises:
            DeliveryRefused: a payload is not plain JSON within the limits; checked for every
                payload before the first update is sent.
            CodecError: the client's codec does not match the activation's history.
        """
        bulk_chunks(deliveries)  # every payload checked before the first update is sent
        return await self._shards.deliver_many(workflow, deliveries, misrouted=0)

    async def signal_delivery(self, workflow: str, payload: Any, *, entry: str | None = None) -> None:
        """Deliver one event by signal: in the activation's history when this returns, with no
        disposition (read it with :meth:`delivery`); kept until disposed, or deferred and listed for
        a redrive (docs/webhooks.md, "What a signal sender can rely on", has the bounds). Faster than
        an update under volume; no answer to wait for.

        Args:
            workflow: The workflow identity (the Workfile's ``name``).
            payload: The event, a plain JSON value within the limits of docs/limits.md.
            entry: The trigger entry; optional when the Workfile has one external entry.

        Raises:
            DeliveryRefused: the payload is not plain JSON within the limits; nothing was sent.
            CodecError: the client's codec does not match the activation's history.
        """
        check_size(payload)
        request = DeliveryRequest(entry=entry, payload=payload)
        await self._check_codec(workflow)
        shard = (await self._routing.get(workflow, fallback=True)).shard(entry, payload)  # a shard passes on a misrouted one
        await self._retry(lambda: self._handle(workflow, shard).signal(DELIVER_SIGNAL, request), workflow=workflow)

    async def operate(self, workflow: str, request: OperatorRequest | OperatorAction) -> OperatorResult:
        """Apply an operator action, recorded in the activation's operator log.

        Args:
            workflow: The workflow identity (the Workfile's ``name``).
            request: One action's model from ``wf_initiation.wire`` (``Pause()``, ``Resume()``,
                ``PollNow(entry=...)``, ``SetCursor(entry=..., cursor=...)``, ``Backfill(entry=...,
                start=..., end=...)``, ...) or an ``OperatorRequest``. Its ``action_id`` makes it
                once-only, also across continue-as-new; without one, one is made up.

        Returns:
            ``ok`` and the activation's message (why it was refused, when it was).

        Raises:
            CodecError: the client's codec does not match the activation's history.
        """
        # Every action gets an id, so a retried call (timeout, restart) is applied once (engine dedup).
        # The update id also carries the content's digest: the same action id with another content
        # reaches the activation, which refuses it, instead of the server replaying the first result.
        action = as_action(request)
        if isinstance(action, Redrive) and not action.payloads:
            return await self.redrive(workflow, action)
        await self._check_codec(workflow)
        shard = await self._shards.holder_of(workflow, getattr(action, "run_key", None))
        return await self._operate_on(workflow, action, shard)

    async def _operate_on(self, workflow: str, action: OperatorAction, shard: int) -> OperatorResult:
        request = OperatorRequest(action.model_copy(update={"action_id": action.action_id or f"cli-{uuid.uuid4().hex}"}))
        problem = request_problem(request)
        if problem is not None:
            return OperatorResult(ok=False, message=f"refused before sending: {problem}", action_id=request.action_id)
        uid = f"op-{request.action_id}~{content_digest(request)}"
        await self._check_codec(workflow)
        return await self._retry(lambda: self._handle(workflow, shard).execute_update(
            OPERATE_UPDATE, request, id=uid, result_type=OperatorResult, rpc_timeout=self.update_timeout), workflow=workflow)

    async def redrive(self, workflow: str, request: Redrive, *, shard: int | None = None) -> OperatorResult:
        """Offer again events that did not run, once their cause is fixed (docs/behaviour.md, "Re-drive").

        The activation keeps invalid deliveries and quarantined poll items with their payloads, start
        faults with their runs, and lists deferred signals (:meth:`redrivable` lists them all). The
        events ``request`` selects are offered again, each once, keeping their original delivery
        ids: deferred signals' payloads are read back from the activation's history first; a
        selection of more than 100 events goes in pages, one action each (its id: ``request``'s
        action id and the page's numbers), on every shard of a sharded activation (or ``shard``).

        Args:
            workflow: The workflow identity (the Workfile's ``name``).
            request: What to re-drive: ``Redrive(delivery_id=...)``, ``Redrive(first=3, last=9)``,
                ``Redrive(kind="invalid")``, ``Redrive(all_events=True)``, ...; its ``action_id``
                (made up when omitted) makes each page once-only, also across continue-as-new.
            shard: Only this shard's events (numbers are per shard).

        Returns:
            ``ok`` when at least one event was offered; ``redriven``: each selected event's outcome,
            its disposition (``accepted``, ``queued``, ``invalid`` again, ...) or ``not_offered`` and
            why (re-driven already, its id taken since, its signal gone from history, ...).

        Raises:
            CodecError: the client's codec does not match the activation's history.
        """
        await self._check_codec(workflow)
        return await _redrive.redrive_events(self, workflow, request, shard)

    async def redrivable(self, workflow: str, *, shard: int | None = None) -> AsyncIterator[dict[str, Any]]:
        """Every event the activation keeps for re-drive, by number, each shard's (``wfi state --redrivable``).

        Args:
            workflow: The workflow identity (the Workfile's ``name``).
            shard: Only this shard's.

        Yields:
            ``{shard, number, kind, entry, delivery_id, at, kept_until, reason, bytes, tries, digest,
            run_key, events}`` (a deferred signal also ``run_id``: the activation run whose history holds it).
        """
        await self._check_codec(workflow)
        async for event in _redrive.redrivable(self, workflow, shard):
            yield event

    async def deactivate(self, workflow: str, request: DeactivateRequest) -> DeactivateResult:
        """Deactivate an activation (docs/lifecycle.md): refuse deliveries, stop schedules and polls,
        settle queued work; the workflow completes once settled (:meth:`deactivated`).

        Args:
            workflow: The workflow identity (the Workfile's ``name``).
            request: How queued and running work is settled, and an optional ``action_id``.

        Returns:
            Its status (``deactivating``, ``deactivated``, ``refused``) and what is left to settle.

        Raises:
            CodecError: the client's codec does not match the activation's history.
        """
        request = request.model_copy(update={"action_id": request.action_id or f"cli-{uuid.uuid4().hex}"})
        await self._check_codec(workflow)
        return await self._shards.deactivate(workflow, request)

    async def deactivated(self, workflow: str) -> DeactivatedResult:
        """Wait until the activation (every shard of it) completed its deactivation; shard 0's result.

        Args:
            workflow: The workflow identity (the Workfile's ``name``).

        Returns:
            The final record, summary and state of the activation's shard 0.
        """
        return await self._shards.deactivated(workflow)

    async def deactivated_state(self, workflow: str) -> bytes | None:
        """The final state of a deactivated activation, which :meth:`activate` resumes from.

        Args:
            workflow: The workflow identity (the Workfile's ``name``).

        Returns:
            The engine's carried state, or None when the activation runs, never ran, or ended
            another way (terminated, failed).
        """
        latest = await self._latest(workflow)
        if latest is None or latest.status != WorkflowExecutionStatus.COMPLETED:
            return None
        return await self._final_state(workflow, latest.run_id)

    async def state(self, workflow: str, *, include_events: bool = False, settle: int = 3) -> dict[str, Any]:
        """The activation's full state, as ``wfi state --json`` prints it.

        The entries take more queries than the state, so the two are read at different moments. They
        are read state first, so the entries always include every disposition the state refers to
        (a cursor never looks ahead of its items, POLL-8). With ``settle`` > 1 the state is read again
        after the entries, up to ``settle`` times, until nothing moved in between, so that the entries
        are not ahead of the state either; under traffic that never pauses the first combination is
        returned.

        Args:
            workflow: The workflow identity (the Workfile's ``name``).
            include_events: Also every live dedup entry (paged queries), under ``events`` by key.
            settle: How many times the state may be read to match the entries (1: once).

        Returns:
            ``summary`` (as :meth:`summary`), queues, runs, schedules, polls, errors, the operator
            log, and ``events`` when asked for.

        Raises:
            CodecError: the client's codec does not match the activation's history.
            ActivationNotFound: no activation of ``workflow`` exists.
        """
        await self._check_codec(workflow)
        query = functools.partial(self._query, workflow, STATE_QUERY)
        state = await query()
        if include_events:
            events = {e["key"]: e async for e in self.events(workflow)}
            for _ in range(settle - 1):  # every (state, events) pair here was read state first
                after = await query()
                if after == state:
                    break
                state, events = after, {e["key"]: e async for e in self.events(workflow)}
            state["events"] = events
        if (await self._routing.get(workflow)).shards > 1:
            state = await self._shards.whole_state(workflow, state)
            state["summary"] = await self.summary(workflow)
        await self._real_status(workflow, state.get("summary"))
        return state

    async def events(self, workflow: str, *, page: int = 500) -> AsyncIterator[dict[str, Any]]:
        """Every live dedup entry in acceptance order, fetched ``page`` at a time.

        Args:
            workflow: The workflow identity (the Workfile's ``name``).
            page: Entries per query.

        Yields:
            One entry each: key, entry, delivery id, disposition, run key, sequence number, times.
        """
        await self._check_codec(workflow)
        async for event in self._shards.events(workflow, page):
            yield event

    async def summary(self, workflow: str) -> dict[str, Any]:
        """The activation's short summary, as ``wfi state --summary`` prints it.

        Args:
            workflow: The workflow identity (the Workfile's ``name``).

        Returns:
            Workflow, activation id, ``status`` (``active``, ``paused``, ``deactivated``, ... and,
            for an activation workflow that was terminated, failed, timed out or cancelled, that
            word, with ``closed`` saying when), entries, counters, schedules and polls.

        Raises:
            CodecError: the client's codec does not match the activation's history.
            ActivationNotFound: no activation of ``workflow`` exists.
        """
        await self._check_codec(workflow)
        summary = await self._shards.summary(workflow)
        await self._real_status(workflow, summary)
        shards = (await self._routing.get(workflow)).shards
        stopped = await shards_not_running(lambda k: self._latest(workflow, k), shards)
        if stopped:  # their ids are answered 503 until `wfi activate` starts them again (wf_initiation/_recovery.py)
            summary["shards_not_running"] = stopped
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
        """The recorded disposition of one delivery (how a signalled delivery's is read).

        Args:
            workflow: The workflow identity (the Workfile's ``name``).
            entry: The trigger entry's name.
            delivery_id: The delivery id the entry's manifest derives from the payload.

        Returns:
            Its dedup entry (disposition, run key, times), or None when none is retained.
        """
        await self._check_codec(workflow)
        return await self._shards.delivery(workflow, entry, delivery_id)

    async def _query(self, workflow: str, name: str, *args: Any, shard: int = 0, attempts: int | None = None) -> Any:
        """The answer of the activation's query ``name`` (of shard ``shard``), asked again while the
        error is retryable. A run that ended (terminated, timed out, ...) and keeps answering stale
        gets no next workflow task that would clear it: it is answered from its history, replayed
        here (wf_initiation/_ended.py)."""
        ask = functools.partial(self._handle(workflow, shard).query, name, args=list(args))
        probes = STALE_PROBES if attempts is None else min(attempts, STALE_PROBES)
        try:
            return await self._retry(ask, workflow=workflow, attempts=probes)
        except StaleAnswer:
            latest = await self._latest(workflow, shard)
            if latest is not None and latest.status not in (WorkflowExecutionStatus.RUNNING, None):
                return await answer_from_history(self.client, latest.id, latest.run_id, name, args)
            if attempts is not None and attempts <= probes:
                raise
        except WfiError as exc:  # anything else retryable (no worker yet, a timeout) gets every attempt
            if not exc.retryable or (attempts is not None and attempts <= probes):
                raise
        return await self._retry(ask, workflow=workflow, attempts=attempts)

    async def _retry(self, call: Callable[[], Awaitable[_T]], *, workflow: str | None = None, attempts: int | None = None) -> _T:
        """``await call()``, again with the same ids while what it raises is retryable (the server's
        limit of updates in flight, a restarting server, a rebinding activation, a stale answer of a
        restarted worker), at most ``max_attempts`` times; Temporal's errors raised as
        wf-initiation's (:mod:`wf_initiation._from_temporal`), the original as ``__cause__``."""
        delay = 0.05
        attempts = attempts or self.max_attempts
        for attempt in range(attempts):
            try:
                return await call()
            except Exception as exc:
                error = from_temporal(exc, workflow=workflow, client=self.client)
                if error is None:
                    raise
                if cancelling():
                    # The SDK turns a cancellation of the call into an RPC timeout: a caller's timeout
                    # (asyncio.wait_for) must end the call as cancelled, not be retried.
                    raise asyncio.CancelledError() from exc
                if not error.retryable or attempt == attempts - 1:
                    if error is exc:
                        raise
                    raise error from exc
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")
