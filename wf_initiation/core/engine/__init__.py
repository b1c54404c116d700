"""The activation engine: pure, deterministic initiation rules (no Temporal import)."""

from . import operator, summary
from ._engine import Engine, event_key, initial_state, payload_digest
from ._poll import PollCall, PollItemIn, PollResultIn
from ._types import Command, ControlRun, DeliveryResult, Disposition, EngineState, SignalRun, StartRun

__all__ = [
    "Command", "ControlRun", "DeliveryResult", "Disposition", "Engine", "EngineState", "PollCall", "PollItemIn",
    "PollResultIn", "SignalRun", "StartRun", "event_key", "initial_state", "operator", "payload_digest", "summary",
]
