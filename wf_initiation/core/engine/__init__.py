"""The activation engine: pure, deterministic initiation rules (no Temporal import).

:class:`Engine` is its one entry point: each call returns a :class:`Decision` (the answer and the
commands to execute). See docs/architecture.md for its layers.
"""

from . import operator, summary
from ._codec import decode_state
from ._deactivate import Outcome as DeactivateOutcome
from ._dispatch import (
    FIRST_LOOK_SWEEP,
    FIRST_LOOK_WAIT,
    Call,
    ControlCall,
    Dispatcher,
    GrowCall,
    MeasureCall,
    Plan,
    PollCall,
    PublishCall,
    SignalCall,
    StartCall,
    StartFault,
    WatchCall,
)
from ._facade import Engine
from ._kept import selects as redrive_selects
from ._keys import event_key, payload_digest
from ._lanes import LANES_SIGNAL, LaneNotice
from ._ledger import KEEP_LIVE_RELEASED, KEEP_LIVE_RELEASED_BEFORE
from ._lifecycle import lifecycle_event_id
from ._machine import initial_state
from ._offer import EVENT_SIGNAL, SubscriptionEvent
from ._poll import PollItemIn, PollResultIn
from ._subscriptions import (
    LIFECYCLE_SIGNAL,
    SUBSCRIBE_SIGNAL,
    UNSUBSCRIBE_SIGNAL,
    LifecycleEvent,
    SubscribeRequest,
    UnsubscribeRequest,
    transition_event,
)
from ._types import (
    EVENT_RECORD,
    EVENT_RECORD_FIELDS,
    NOT_RETAINED,
    ROUTED_TO,
    Command,
    Compat,
    ControlRun,
    Decision,
    DeliveryResult,
    Disposition,
    EngineState,
    ErrorRecord,
    EventRecord,
    GrowShards,
    MeasureShards,
    OperatorOutcome,
    PublishEvent,
    RedriveKind,
    RedrivenEvent,
    RunPoll,
    ShardFill,
    SignalRef,
    SignalRun,
    StartRun,
    WatchRuns,
    WatchTarget,
)

__all__ = [
    "EVENT_RECORD", "EVENT_RECORD_FIELDS", "EVENT_SIGNAL", "KEEP_LIVE_RELEASED", "KEEP_LIVE_RELEASED_BEFORE", "LANES_SIGNAL", "LIFECYCLE_SIGNAL", "NOT_RETAINED", "ROUTED_TO", "SUBSCRIBE_SIGNAL", "UNSUBSCRIBE_SIGNAL", "Call", "Command",
    "Compat", "ControlCall", "ControlRun", "Dispatcher", "FIRST_LOOK_SWEEP", "FIRST_LOOK_WAIT", "Plan", "PollCall", "PublishCall", "SignalCall", "StartCall",
    "StartFault", "WatchCall", "DeactivateOutcome", "Decision", "DeliveryResult", "Disposition", "LaneNotice", "Engine", "EngineState",
    "ErrorRecord", "EventRecord", "GrowCall", "GrowShards", "LifecycleEvent", "MeasureCall", "MeasureShards", "ShardFill", "OperatorOutcome", "PollItemIn", "PollResultIn", "PublishEvent", "RedriveKind", "RedrivenEvent", "RunPoll",
    "SignalRef", "SignalRun", "StartRun", "SubscribeRequest", "SubscriptionEvent", "UnsubscribeRequest", "WatchRuns", "WatchTarget",
    "decode_state", "event_key", "lifecycle_event_id", "initial_state", "operator", "payload_digest", "redrive_selects", "summary",
    "transition_event",
]
