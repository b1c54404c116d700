"""How the engine's commands are carried out, as data: which activity calls a workflow task makes.

The activation workflow hands every command the engine decided to a :class:`Dispatcher` and makes
exactly the calls its :class:`Plan` lists, in that order (the order of a task's commands is part of
its history, so it must not depend on anything but these inputs). The dispatcher owns what is in
flight and the budgets of one workflow task:

* runs to start go out in chunks: at most ``START_BATCH`` runs and ``MAX_START_BYTES`` of inputs per
  start activity, at most ``MAX_START_ACTIVITIES`` activities at once, and at most
  ``MAX_TASK_BYTES`` of inputs scheduled per workflow task (the rest waits for the next task); a run
  whose input no start can carry is a start fault at once;
* a chunk whose activity failed for good is started again one run per activity (``isolate``), so
  the run that cannot start is found and becomes a start fault without holding up the others;
* kept signals (subscription deliveries, notices) share the task's byte budget; lifecycle events
  are published in batches; running runs are watched by a bounded number of activities; when
  nothing awaits an ending at once (``WatchRuns.prompt`` false), runs started while a first look at
  new runs is out are gathered for the next one (``gathers``), which comes back within
  ``FIRST_LOOK_WAIT``: a burst of starts costs a few watch activities, not one per start;
* runs to cancel or terminate go out in pages (``paged``): at most ``CONTROL_PAGE`` runs per control
  activity and ``MAX_CONTROL_ACTIVITIES`` of them at once, the rest waits in order (a deactivation
  of 10,000 running runs stays far below Temporal's 2,000 pending activities per workflow); kept
  signals likewise wait while ``MAX_SIGNALS_OUT`` are in flight (2,000 pending signals).

A run begun before the budgets (``bounded`` false) keeps the earlier behaviour: fixed chunks, no
byte budget, signals sent at once (its history was recorded that way). A run begun before the pages
(``paged`` answers false, asked once, when the first control comes) controls one run per activity.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from ..limits import MAX_RUN_INPUT_BYTES, MAX_START_BYTES, MAX_TASK_BYTES, json_size
from ._types import (
    Command,
    ControlRun,
    GrowShards,
    MeasureShards,
    PublishEvent,
    RunPoll,
    SignalRun,
    StartRun,
    WatchRuns,
    WatchTarget,
)

START_BATCH = 100
MAX_START_ACTIVITIES = 4
LOCAL_START_MAX = 10  # an anticipated occurrence's start holds the task: only small chunks
WATCH_BATCH = 200
MAX_WATCHERS = 8
FIRST_LOOK_WAIT = 5.0
"""Seconds a first look at gathered new runs waits for their endings (it comes back sooner once all
ended, and the runs gathered meanwhile go out in the next): how much later than at once an ending
may be learned when nothing awaits it (``WatchRuns.prompt`` false). A run still going when it comes
back is then watched as any other."""
FIRST_LOOK_SWEEP = 1.0
"""Seconds a first look waits before its first sweep: the runs were just started, and one sweep then
finds the endings of many (a first look ends once all its runs did), so a burst takes fewer looks."""
PUBLISH_BATCH = 200
CONTROL_PAGE = 100
MAX_CONTROL_ACTIVITIES = 4
MAX_SIGNALS_OUT = 500  # kept signals in flight (paged): Temporal allows 2,000 pending signals per workflow


@dataclass(frozen=True, slots=True, eq=False)
class StartCall:
    """Start these runs in one activity; ``hold``: a local activity that first sleeps the task's hold."""

    runs: tuple[StartRun, ...]
    hold: bool


@dataclass(frozen=True, slots=True, eq=False)
class ControlCall:
    """Cancel or terminate these runs; ``paged``: in one ``control_runs`` activity (else one
    ``control_run`` activity for its single run, as runs begun before the pages recorded it)."""

    commands: tuple[ControlRun, ...]
    paged: bool = True

    @property
    def command(self) -> ControlRun:
        """The single run of an unpaged call."""
        return self.commands[0]


@dataclass(frozen=True, slots=True, eq=False)
class SignalCall:
    command: SignalRun


@dataclass(frozen=True, slots=True, eq=False)
class PublishCall:
    events: tuple[PublishEvent, ...]


@dataclass(frozen=True, slots=True, eq=False)
class WatchCall:
    runs: tuple[WatchTarget, ...]
    first_look: bool = False
    """Gathered runs never watched before: the watch reports once all ended, or after ``FIRST_LOOK_WAIT``."""


@dataclass(frozen=True, slots=True, eq=False)
class PollCall:
    command: RunPoll


@dataclass(frozen=True, slots=True, eq=False)
class MeasureCall:
    """Ask every shard how full it is (shard 0 of an activation that grows itself)."""

    command: MeasureShards


@dataclass(frozen=True, slots=True, eq=False)
class GrowCall:
    """Split the activation into more shards, as ``wfi activate`` would."""

    command: GrowShards


Call = StartCall | ControlCall | SignalCall | PublishCall | WatchCall | PollCall | MeasureCall | GrowCall


@dataclass(frozen=True, slots=True)
class StartFault:
    """A run that cannot be started: the shell reports it with ``Engine.run_start_failed``."""

    run_key: str
    error: str


@dataclass(frozen=True, slots=True)
class Plan:
    calls: list[Call] = field(default_factory=list)
    faults: list[StartFault] = field(default_factory=list)

    @property
    def held(self) -> bool:
        """Whether a start holds the task until the instant (then no separate wait is needed)."""
        return any(type(c) is StartCall and c.hold for c in self.calls)


class Dispatcher:
    """What is in flight for one activation run, and the current workflow task's byte budget."""

    def __init__(self, *, bounded: bool, paged: Callable[[], bool] | None = None,
                 gathers: Callable[[], bool] | None = None) -> None:
        """``paged``: whether controls go out in pages (asked when the first control comes; default yes).
        ``gathers``: whether new runs may be gathered for the next watcher (asked when first nothing
        awaits an ending at once; default yes)."""
        self.bounded = bounded
        self._paged_answer: Callable[[], bool] = paged or (lambda: True)
        self._paged: bool | None = None
        self._gathers_answer: Callable[[], bool] = gathers or (lambda: True)
        self._gathers: bool | None = None
        self._controls: list[ControlRun] = []  # paged: controls waiting for room, in order
        self._controlling: set[tuple[str, str]] = set()  # (run key, action) waiting or in a control activity
        self._signals_out = 0  # kept signals in flight
        self._starting: set[str] = set()  # run keys in the backlog or in a start activity
        self._backlog: list[StartRun] = []
        self.start_calls = 0  # start activities in flight
        self._isolate: set[str] = set()  # run keys to start alone (their chunk failed)
        self._input_sizes: dict[str, int] = {}
        self._task_bytes = 0
        self._signals: list[SignalRun] = []
        self.acking: set[str] = set()  # keys of kept signals and publishes in flight
        self._watched: set[str] = set()
        self._watchers = 0
        self._returns = 0
        self._returned: dict[str, int] = {}  # run key -> when its watcher came back, while it waits (see _watch)
        self._seen: set[str] = set()  # running runs watched at least once (what is left is new: a first look)
        self._first_looks = 0  # first-look watchers in flight
        self.controls = 0  # control activities in flight

    # ------------------------------------------------------------------ planning
    def new_task(self) -> None:
        """A new workflow task: its byte budget starts afresh."""
        self._task_bytes = 0

    @property
    def watched(self) -> AbstractSet[str]:
        """Run keys a watch activity in flight holds (Engine.tick leaves them out)."""
        return self._watched

    @property
    def watch_room(self) -> bool:
        """Whether another watch activity may begin."""
        return self._watchers < MAX_WATCHERS

    @property
    def starts_pending(self) -> bool:
        return bool(self._backlog) or self.start_calls > 0

    def plan(self, commands: Sequence[Command], *, hold: bool = False) -> Plan:
        """The calls for ``commands`` (and what earlier tasks left waiting), in the order to make them."""
        plan = Plan()
        for c in commands:
            if type(c) is StartRun and c.run_key not in self._starting:
                self._starting.add(c.run_key)
                self._backlog.append(c)
        while self._backlog and self.start_calls < MAX_START_ACTIVITIES:
            chunk = self._next_start_chunk(plan.faults)
            if not chunk:
                break  # this task's byte budget is spent: the rest goes with the next task
            self.start_calls += 1
            plan.calls.append(StartCall(runs=tuple(chunk), hold=hold and len(chunk) <= LOCAL_START_MAX))
        self._plan_controls([c for c in commands if type(c) is ControlRun], plan)
        for c in commands:
            if type(c) is SignalRun and c.key not in self.acking:
                if self.bounded:
                    self._signals.append(c)
                else:
                    if c.key:
                        self.acking.add(c.key)
                    plan.calls.append(SignalCall(c))
        self._issue_signals(plan)
        publishes = [c for c in commands if type(c) is PublishEvent and c.key not in self.acking]
        for i in range(0, len(publishes), PUBLISH_BATCH):
            batch = tuple(publishes[i : i + PUBLISH_BATCH])
            self.acking.update(c.key for c in batch)
            plan.calls.append(PublishCall(batch))
        watch = [c for c in commands if type(c) is WatchRuns]
        if watch:
            self._watch(watch[-1].runs, plan, prompt=watch[-1].prompt)
        plan.calls.extend(PollCall(c) for c in commands if type(c) is RunPoll)
        plan.calls.extend(MeasureCall(c) for c in commands if type(c) is MeasureShards)
        plan.calls.extend(GrowCall(c) for c in commands if type(c) is GrowShards)
        return plan

    def _plan_controls(self, controls: list[ControlRun], plan: Plan) -> None:
        """Controls in pages of CONTROL_PAGE, at most MAX_CONTROL_ACTIVITIES in flight (a control
        already waiting or in flight is not taken twice); unpaged: one call per control."""
        if controls and not self._pages():
            plan.calls.extend(ControlCall((c,), paged=False) for c in controls)  # counted by control_began
            return
        for c in controls:
            if (c.run_key, c.action) not in self._controlling:
                self._controlling.add((c.run_key, c.action))
                self._controls.append(c)
        while self._controls and self.controls < MAX_CONTROL_ACTIVITIES:
            page, self._controls = self._controls[:CONTROL_PAGE], self._controls[CONTROL_PAGE:]
            self.controls += 1
            plan.calls.append(ControlCall(tuple(page)))

    def _pages(self) -> bool:
        """Whether this run pages its controls and signals (asked once, where that first matters)."""
        if self._paged is None:
            self._paged = self._paged_answer()
        return self._paged

    @property
    def controls_pending(self) -> bool:
        """Whether a control is in flight or waiting for room."""
        return self.controls > 0 or bool(self._controls)

    @property
    def controls_waiting(self) -> int:
        """Controls waiting for room (paged)."""
        return len(self._controls)

    def _next_start_chunk(self, faults: list[StartFault]) -> list[StartRun]:
        """The next start activity's runs: at most START_BATCH, and (with the budgets) at most
        MAX_START_BYTES of inputs, within what this task may still schedule; a run whose chunk
        failed goes alone; a run whose input no start can carry is a start fault at once."""
        if not self.bounded:
            head, self._backlog = self._backlog[:START_BATCH], self._backlog[START_BATCH:]
            return head
        chunk: list[StartRun] = []
        size = 0
        while self._backlog and len(chunk) < START_BATCH:
            command = self._backlog[0]
            n = self._input_size(command)
            if n > MAX_RUN_INPUT_BYTES:
                self._backlog.pop(0)
                faults.append(self._fault(command.run_key, f"its input is {n} bytes; a run input may have at most "
                                                            f"{MAX_RUN_INPUT_BYTES} (Temporal's payload limit is 2 MiB)"))
                continue
            alone = command.run_key in self._isolate
            if chunk and (alone or size + n > MAX_START_BYTES):
                break
            if self._task_bytes + n > MAX_TASK_BYTES and self._task_bytes > 0:
                break
            self._backlog.pop(0)
            chunk.append(command)
            size += n
            self._task_bytes += n
            if alone:
                break
        return chunk

    def _input_size(self, command: StartRun) -> int:
        size = self._input_sizes.get(command.run_key)
        if size is None:
            size = self._input_sizes[command.run_key] = len(command.input.model_dump_json())
        return size

    def _fault(self, run_key: str, error: str) -> StartFault:
        self._starting.discard(run_key)
        self._isolate.discard(run_key)
        self._input_sizes.pop(run_key, None)
        return StartFault(run_key, error)

    def _issue_signals(self, plan: Plan) -> None:
        """The kept subscription deliveries and notices, within this task's byte budget."""
        while self._signals:
            if self._signals_out >= MAX_SIGNALS_OUT and self._pages():
                return  # the next ones go as these are confirmed (each brings a task)
            command = self._signals[0]
            size = json_size(command.payload)
            if self._task_bytes + size > MAX_TASK_BYTES and self._task_bytes > 0:
                return  # the next task sends the rest (something sent in this one brings that task)
            self._signals.pop(0)
            if command.key in self.acking:
                continue
            self._task_bytes += size
            if command.key:
                self.acking.add(command.key)
                self._signals_out += 1
            plan.calls.append(SignalCall(command))

    def _watch(self, running: list[WatchTarget], plan: Plan, *, prompt: bool = True) -> None:
        """Watch the running runs no watcher holds yet: at most MAX_WATCHERS activities of WATCH_BATCH runs.

        With more runs running than the watchers hold, those never watched go first, then those
        watched least recently: a watcher that comes back with no ending (after its max_wait) must not
        take the same runs again while others were never looked at (their endings would wait for
        the first runs to end).

        Unless ``prompt``, runs never watched go in first looks of their own, and while one is out,
        new runs wait for the next (fewer than WATCH_BATCH of them): the endings of a burst of starts
        come back in a few watches, each costing an activity and a workflow task."""
        unwatched = [r for r in running if r.run_key not in self._watched]
        seen = self._seen
        if seen:  # only runs still going are remembered
            self._seen = seen = {k for k in seen if k in self._watched} | {r.run_key for r in unwatched if r.run_key in seen}
        fresh = [] if prompt else [r for r in unwatched if r.run_key not in seen]
        if fresh and self._gathering():
            unwatched = [r for r in unwatched if r.run_key in seen]
            if self._first_looks and len(fresh) < WATCH_BATCH:
                fresh = []  # gathered for the next first look
        else:
            fresh = []
        while fresh and self._watchers < MAX_WATCHERS:
            chunk, fresh = fresh[:WATCH_BATCH], fresh[WATCH_BATCH:]
            self._issue_watch(chunk, plan, first_look=True)
        returned = self._returned
        if len(unwatched) > WATCH_BATCH * (MAX_WATCHERS - self._watchers):
            unwatched.sort(key=lambda r: returned.get(r.run_key, -1))  # stable: otherwise in start order
            self._returned = returned = {r.run_key: returned[r.run_key] for r in unwatched if r.run_key in returned}
        else:
            returned.clear()  # every waiting run is watched now; what is left belongs to runs that ended
        while unwatched and self._watchers < MAX_WATCHERS:
            chunk, unwatched = unwatched[:WATCH_BATCH], unwatched[WATCH_BATCH:]
            self._issue_watch(chunk, plan)

    def _issue_watch(self, chunk: list[WatchTarget], plan: Plan, *, first_look: bool = False) -> None:
        keys = [r.run_key for r in chunk]
        self._watched.update(keys)
        self._seen.update(keys)
        self._watchers += 1
        self._first_looks += first_look
        for key in keys:
            self._returned.pop(key, None)
        plan.calls.append(WatchCall(tuple(chunk), first_look=first_look))

    def _gathering(self) -> bool:
        if self._gathers is None:
            self._gathers = self._gathers_answer()
        return self._gathers

    # ------------------------------------------------------------------ what came back
    def start_ended(self, call: StartCall) -> None:
        """The start activity returned or failed: its runs are no longer starting."""
        self.start_calls -= 1
        self._starting.difference_update(c.run_key for c in call.runs)

    def started(self, run_key: str) -> None:
        """A run of a start activity was reported (started, closed or faulted)."""
        self._isolate.discard(run_key)
        self._input_sizes.pop(run_key, None)

    def start_failed(self, call: StartCall, *, permanent: bool, error: str) -> list[StartFault]:
        """A start activity failed for good: start its runs again, one per activity when the cause
        cannot pass (its input cannot be decoded); a run that fails alone that way is a start fault.
        A transient cause (the server unreachable for minutes) only starts the chunk again."""
        chunk = list(call.runs)
        if permanent and len(chunk) == 1:
            return [self._fault(chunk[0].run_key, error)]
        if permanent:
            self._isolate.update(c.run_key for c in chunk)
        self._starting.update(c.run_key for c in chunk)
        self._backlog[:0] = chunk
        return []

    def control_began(self, call: ControlCall) -> None:
        """An unpaged control's activity begins (a page was counted when planned)."""
        if not call.paged:
            self.controls += 1

    def control_ended(self, call: ControlCall) -> None:
        """The control activity returned or failed for good: its runs may be controlled again."""
        self.controls -= 1
        self._controlling.difference_update((c.run_key, c.action) for c in call.commands)

    def signal_ended(self, call: SignalCall) -> None:
        if call.command.key is not None:
            self.acking.discard(call.command.key)
            if self.bounded:
                self._signals_out -= 1

    def publish_ended(self, call: PublishCall) -> None:
        self.acking.difference_update(c.key for c in call.events)

    def watch_ended(self, call: WatchCall) -> None:
        self._watchers -= 1
        self._first_looks -= call.first_look
        self._watched.difference_update(r.run_key for r in call.runs)
        self._returns += 1
        self._returned.update((r.run_key, self._returns) for r in call.runs)
