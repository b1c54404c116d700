"""Every behaviour an activation run keeps of an earlier build, decided in one place.

A change to what the activation decides or emits for an existing history goes behind a patch
(``workflow.patched``): a run that recorded its history without the patch's marker replays with the
earlier behaviour; every new run (and every run after continue-as-new) has the current one.

| flag | source | since | the earlier behaviour |
|---|---|---|---|
| ``engine.legacy_evaluation`` | ``spec.evaluation < 2`` | 30 Nov 2026 | Python-literal expression results, the old cron day rule |
| ``engine.bounded`` | patch ``wfi-hostile-input-budgets`` | 1 Dec 2026 | no budgets of ``core.limits`` |
| ``inbox``, ``engine.signals_kept`` | patch ``wfi-delivery-inbox`` | 1 Dec 2026 | handlers past the task's budget waited on 1 ms timers; a signalled delivery was deferred like an update |
| ``engine.capacity`` | patch ``wfi-capacity`` | 2 Dec 2026 | no capacity: the state grew until continue-as-new failed; no signal count |
| ``engine.redrive_kept`` | patch ``wfi-redrive`` | 5 Dec 2026 | nothing kept for re-drive: invalid payloads, quarantined items and start faults' runs were not kept (nor counted in the capacity) |
| ``wake_ahead()`` | patch ``wfi-schedule-wake-ahead`` | 30 Nov 2026 | timers at the occurrences' instants |
| ``poll_now_survives_flight()`` | patch ``wfi-poll-now-survives-flight`` | 30 Nov 2026 | ``poll_now`` during a poll was dropped |
| ``sharded_waits()`` | patch ``wfi-sharded-waits`` | 2 Dec 2026 | a wait (``subscribe``) for an external entry of a sharded activation was refused |
| ``forwards_land()`` | patch ``wfi-forwards-land`` | 2 Dec 2026 | continue-as-new did not wait for deliveries being passed to another shard (the server drops a signal whose sender has closed) |
| ``verified_splits()`` | patch ``wfi-verified-splits`` | 4 Dec 2026 | a split's child acted on its parent's signals (drained, lane notices) unchecked |
| ``faults_fail_task()`` | patch ``wfi-task-faults`` | 3 Dec 2026 | an exception one of the activation's unawaited tasks did not handle was only logged (workflows/_tasks.py) |
| ``paged_controls()`` | patch ``wfi-paged-controls`` | 4 Dec 2026 | one ``wfi.control_run`` activity per run cancelled or terminated, all at once (past 2,000 the server refused the task) |
| ``spec.unencoded`` | ``spec.unencoded`` (absent: ``accept``) | 6 Dec 2026 | every delivery taken whatever its encoding (no patch: only a spec bound since says ``refuse`` or ``record``) |
| ``poll_retry_after()`` | patch ``wfi-poll-retry-after`` | 6 Dec 2026 | a failed poll's ``next_retry_delay`` (a source's ``Retry-After``) was ignored: the next poll came after the backoff alone |
| ``retires_records()`` | patch ``wfi-retire-records`` | 6 Dec 2026 | a run continued as new only for its history or signals, holding every released dedup entry of the run as a full record until then (tens of thousands under ``deliver_many``) |
| ``keep_live_released()`` | patch ``wfi-fewer-records`` | 6 Dec 2026 | a run carried the 2,000 newest released dedup entries as full records (``KEEP_LIVE_RELEASED_BEFORE``), not 500 |
| ``quiet_waiting()`` | patch ``wfi-quiet-waiting`` | 6 Dec 2026 | each signal arriving behind signals waiting for room tried the oldest again (a try of the task's budget each, so a burst brought more tasks) |
| ``gathers_watches()`` | patch ``wfi-gathered-watches`` | 7 Dec 2026 | every run started was watched at once, by a watch activity of its own start's runs, even when nothing awaited its ending (one more activity and workflow task per start) |

When to retire a flag (and its old code path): once no activation begun before its change can
still run or be replayed, i.e. every such activation has continued as new or closed and its closed
runs are past the namespace's retention (``legacy_evaluation``: once every such activation was
re-activated, since the spec travels across continue-as-new).

Not behind a patch, because no recorded history can differ: the schedule options of the deployment's
``schedule:`` (6 Dec 2026: jitter, pause_on_failure, remaining_runs) change nothing while at their
defaults, which every spec recorded before them decodes to; the ``trigger`` action and the notes of
``pause``/``resume`` only exist in requests a build before them refused (or, a legacy flat request's
note, change only the state and the update's message, which a replay does not compare).

The first four are read when the run begins, in this order (the order of their markers is part of
the history; ``wfi-redrive`` is read there because the engine decides what it keeps inside a delivery,
and no history recorded before it has its marker anywhere). The last twelve are asked lazily, where the behaviour first differs, and then kept:
a patch marker is only found where the run first asked for it, so asking earlier would give
histories recorded by the builds before this module a different answer.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from wf_initiation.core.activation import EVALUATION_VERSION, ActivationSpec
    from wf_initiation.core.engine import KEEP_LIVE_RELEASED, KEEP_LIVE_RELEASED_BEFORE, Compat, Engine

BOUNDED_PATCH = "wfi-hostile-input-budgets"
INBOX_PATCH = "wfi-delivery-inbox"
CAPACITY_PATCH = "wfi-capacity"
REDRIVE_PATCH = "wfi-redrive"
WAKE_AHEAD_PATCH = "wfi-schedule-wake-ahead"
POLL_NOW_PATCH = "wfi-poll-now-survives-flight"
FORWARDS_LAND_PATCH = "wfi-forwards-land"
SHARDED_WAITS_PATCH = "wfi-sharded-waits"
TASK_FAULTS_PATCH = "wfi-task-faults"
VERIFIED_SPLITS_PATCH = "wfi-verified-splits"
PAGED_CONTROLS_PATCH = "wfi-paged-controls"
POLL_RETRY_AFTER_PATCH = "wfi-poll-retry-after"
RETIRE_RECORDS_PATCH = "wfi-retire-records"
FEWER_RECORDS_PATCH = "wfi-fewer-records"
QUIET_WAITING_PATCH = "wfi-quiet-waiting"
GATHERED_WATCHES_PATCH = "wfi-gathered-watches"


class RunCompat:
    """The compatibility decisions of one activation run (see the module docstring)."""

    def __init__(self, spec: ActivationSpec) -> None:
        bounded = workflow.patched(BOUNDED_PATCH)
        self.inbox = bounded and workflow.patched(INBOX_PATCH)
        capacity = self.inbox and workflow.patched(CAPACITY_PATCH)
        redrive_kept = capacity and workflow.patched(REDRIVE_PATCH)
        self.engine = Compat(bounded=bounded, legacy_evaluation=spec.evaluation < EVALUATION_VERSION,
                             signals_kept=self.inbox, capacity=capacity, redrive_kept=redrive_kept)
        self._wake_ahead: bool | None = None
        self._poll_now: bool | None = None
        self._forwards_land: bool | None = None
        self._sharded_waits: bool | None = None
        self._faults_fail_task: bool | None = None
        self._verified_splits: bool | None = None
        self._paged_controls: bool | None = None
        self._poll_retry_after: bool | None = None
        self._retires_records: bool | None = None
        self._fewer_records: bool | None = None
        self._quiet_waiting: bool | None = None
        self._gathers_watches: bool | None = None

    def quiet_waiting(self) -> bool:
        """Whether a signal arriving behind signals that wait for room joins them without a try
        (workflows/_inbox.py; asked only when the earlier build would have tried)."""
        if self._quiet_waiting is None:
            self._quiet_waiting = workflow.patched(QUIET_WAITING_PATCH)
        return self._quiet_waiting

    def poll_retry_after(self) -> bool:
        """Whether a failed poll's ``next_retry_delay`` (a source's ``Retry-After``) delays the next poll
        (asked only when a failed poll carries one)."""
        if self._poll_retry_after is None:
            self._poll_retry_after = workflow.patched(POLL_RETRY_AFTER_PATCH)
        return self._poll_retry_after

    def retires_records(self) -> bool:
        """Whether the run continues as new once it holds more released dedup entries as full
        records than ``limits.RECORDS_PER_RUN`` past those it carries (asked only when it does)."""
        if self._retires_records is None:
            self._retires_records = workflow.patched(RETIRE_RECORDS_PATCH)
        return self._retires_records

    def keep_live_released(self) -> int:
        """How many of the newest released dedup entries the run carries as full records across
        continue-as-new, and the base past which it continues as new to retire the rest (asked when
        the run first holds more than 500 plus ``limits.RECORDS_PER_RUN``, or when it continues as
        new, whichever comes first)."""
        if self._fewer_records is None:
            self._fewer_records = workflow.patched(FEWER_RECORDS_PATCH)
        return KEEP_LIVE_RELEASED if self._fewer_records else KEEP_LIVE_RELEASED_BEFORE

    def retire_due(self, engine: Engine) -> bool:
        """Whether the run continues as new to retire released dedup entries (the worker's memory
        per id): the patches are asked only once the current build's bound is passed, as the build
        that recorded the history asked its own."""
        if not engine.retire_due(KEEP_LIVE_RELEASED):
            return False
        return engine.retire_due(self.keep_live_released()) and self.retires_records()

    def gathers_watches(self) -> bool:
        """Whether runs started while a first look at new runs is out wait for the next when nothing
        awaits their endings at once (``core.engine.Dispatcher``; asked when first nothing does)."""
        if self._gathers_watches is None:
            self._gathers_watches = workflow.patched(GATHERED_WATCHES_PATCH)
        return self._gathers_watches

    def paged_controls(self) -> bool:
        """Whether runs are cancelled / terminated in pages (``core.engine.Dispatcher``; asked when
        the first control comes)."""
        if self._paged_controls is None:
            self._paged_controls = workflow.patched(PAGED_CONTROLS_PATCH)
        return self._paged_controls

    def wake_ahead(self) -> bool:
        """Whether anticipated occurrences are held by a wait activity (asked only for a schedule
        with ``schedule_wake_ahead`` and an occurrence ahead)."""
        if self._wake_ahead is None:
            self._wake_ahead = workflow.patched(WAKE_AHEAD_PATCH)
        return self._wake_ahead

    def poll_now_survives_flight(self) -> bool:
        """Whether ``poll_now`` during a poll in flight polls again when it ends (asked only for poll_now)."""
        if self._poll_now is None:
            self._poll_now = workflow.patched(POLL_NOW_PATCH)
        return self._poll_now

    def forwards_land(self) -> bool:
        """Whether the run waits, before it continues as new or completes, for deliveries it passes
        to another shard (asked only when one is in flight then)."""
        if self._forwards_land is None:
            self._forwards_land = workflow.patched(FORWARDS_LAND_PATCH)
        return self._forwards_land

    def sharded_waits(self) -> bool:
        """Whether shard 0 of a sharded activation serves waits for its external entries (copies on
        every shard) instead of refusing them (asked only for such a wait)."""
        if self._sharded_waits is None:
            self._sharded_waits = workflow.patched(SHARDED_WAITS_PATCH)
        return self._sharded_waits

    def faults_fail_task(self) -> bool:
        """Whether an exception one of the activation's unawaited tasks did not handle fails the
        workflow task instead of being logged (asked only when one happens)."""
        if self._faults_fail_task is None:
            self._faults_fail_task = workflow.patched(TASK_FAULTS_PATCH)
        return self._faults_fail_task

    def verified_splits(self) -> bool:
        """Whether a split's child asks its parent before it acts on the parent's signals (drained,
        lane notices; workflows/_splits.py), and a parent marks itself drained before telling
        (asked only when such a signal comes, or a parent drains)."""
        if self._verified_splits is None:
            self._verified_splits = workflow.patched(VERIFIED_SPLITS_PATCH)
        return self._verified_splits
