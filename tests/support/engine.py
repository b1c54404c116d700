"""A test shell for the pure engine: feeds it like the activation workflow does and keeps the
commands of every :class:`Decision`, so a test reads each call's answer directly and the commands
when it wants them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from wf_initiation.core.engine import Command, Decision, Engine, RunPoll, WatchRuns, WatchTarget


class Driver:
    """Wraps an :class:`Engine`: a call returning a Decision returns its ``value`` here; its commands
    are kept (polls and watches apart, as the shell treats them apart)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.outbox: list[Command] = []
        self.polls: list[RunPoll] = []
        self.watching: list[WatchTarget] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.engine, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            out = attr(*args, **kwargs)
            return self.keep(out) if type(out) is Decision else out

        return call

    def keep(self, decision: Decision[Any]) -> Any:
        for c in decision.commands:
            if type(c) is RunPoll:
                self.polls.append(c)
            elif type(c) is WatchRuns:
                self.watching = c.runs
            else:
                self.outbox.append(c)
        return decision.value

    @property
    def core(self) -> Any:
        """The engine's internals, for tests that set up or read what no public call exposes."""
        return self.engine._machine

    def deliver_event(self, entry: str, payload: Any, now: datetime) -> Any:
        """One event of any entry straight into the acceptance pipeline (an internal step: the public
        path of a poll item is ``poll_succeeded``), its commands kept as a decision's."""
        core = self.core
        return self.keep(self.engine._decide(core.deliver_event(core.entry(entry), payload, now)))

    def take_commands(self) -> list[Command]:
        """Start, control and signal commands and lifecycle publishes decided since the last take."""
        out, self.outbox = self.outbox, []
        return out

    def operate(self, request: Any, now: datetime, **kwargs: Any) -> tuple[bool, str]:
        """An operator action's outcome as ``(ok, message)``, the shape these tests compare."""
        outcome = self.keep(self.engine.operate(request, now, **kwargs))
        return outcome.ok, outcome.message

    def polls_due(self, now: datetime) -> list[RunPoll]:
        """The polls the engine decided to run, up to ``now`` (a tick at ``now`` first, as the shell does)."""
        self.keep(self.engine.tick(now))
        out, self.polls = self.polls, []
        return out


def drive(engine: Engine) -> Driver:
    return Driver(engine)
