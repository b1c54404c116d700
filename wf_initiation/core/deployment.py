"""The deployment file: where and how a set of Workfiles is activated.

Example (YAML)::

    temporal:
      address: localhost:7233        # the default: --address, $TEMPORAL_ADDRESS and a profile win over it
      namespace: default             # likewise --namespace, $TEMPORAL_NAMESPACE, a profile
      profile: null                  # the config file's profile (TLS, API key) unless --profile / $TEMPORAL_PROFILE
      task_queue: wfi-activations    # where activation workflows and their activities run
    capabilities: [wf.external-event-initiation, wf.scheduled-initiation, wf.polling-initiation]
    defaults:
      dedup_retention: 24h
      overlap: allow
    connections:                     # secrets as references (wf_initiation.core.connections)
      acme-google: {connector: mail, token: "env:ACME_GOOGLE_TOKEN"}
    workflows:
      support-triage:
        run: {workflow_type: SupportTriage, task_queue: support}
        inputs: {region: eu}
        overlap: buffer_one

Every key of ``defaults`` can be overridden per workflow. Relative paths resolve against the
directory of the deployment file.
"""

from __future__ import annotations

import pathlib
import re
from datetime import timedelta
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from ruamel.yaml import YAML, YAMLError

from ._bounds import (
    MAX_CATCH_UP_BOUND,
    MAX_CAUSATION_DEPTH,
    MAX_CONCURRENT_RUNS,
    MAX_DURATION,
    MAX_FILE_BYTES,
    MAX_HISTORY_EVENTS,
    MAX_POLL_TIMEOUT,
    MAX_TEMPORAL_NAME,
    MAX_THROTTLE_RUNS,
    MIN_POLL_INTERVAL,
    MIN_THROTTLE_PER,
    duration_problem,
)
from ._diagnostics import Diagnostic, DiagnosticError
from ._durations import parse_duration
from ._expr import Evaluator, ExpressionSyntaxError
from ._yaml import YamlTooDeep, check_depth
from .connections import Connection, describe_url, embedded_password, redact
from .ingress import IngressConfig
from .sharding import MAX_SHARDS
from .unencoded import Unencoded
from .unencoded import default as default_unencoded

Overlap = Literal["allow", "skip", "buffer_one", "buffer_all", "cancel_other", "terminate_other"]
ALL_CAPABILITIES = ("wf.scheduled-initiation", "wf.external-event-initiation", "wf.polling-initiation")


_TIMEDELTA = TypeAdapter(timedelta)


def _duration(value: Any) -> timedelta:
    """Our duration strings (30s, 1h30m) or, as serialised by pydantic, ISO-8601 (PT30S)."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str) and value.startswith("P"):
        return _TIMEDELTA.validate_python(value)
    return parse_duration(value)


BOUNDED: dict[str, Any] = {"bounds": True}
"""Validation context of values entering from a deployment file: only then are the bounds of
docs/limits.md enforced. A spec recorded in a history by an earlier build is read without them,
so it keeps replaying (the workflow decodes its input without a context)."""


def _edge(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get("bounds"))


def _within(at_least: timedelta = timedelta(0), at_most: timedelta = MAX_DURATION) -> Any:
    """A field validator refusing, at the edge, a duration outside ``[at_least, at_most]``."""

    def check(value: timedelta | None, info: ValidationInfo) -> timedelta | None:
        problem = duration_problem(value, at_least=at_least, at_most=at_most) if value is not None else None
        if problem is not None and _edge(info):
            raise ValueError(f"the duration {problem}")
        return value

    return check


def _at_most(limit: int) -> Any:
    """A field validator refusing, at the edge, a count above ``limit``."""

    def check(value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and value > limit and _edge(info):
            raise ValueError(f"{value:,} is more than {limit:,}, the limit")
        return value

    return check


def _temporal_name(value: str, info: ValidationInfo) -> str:
    if _edge(info) and not 1 <= len(value) <= MAX_TEMPORAL_NAME:
        raise ValueError(f"a Temporal name has 1 to {MAX_TEMPORAL_NAME} characters, this one {len(value):,}")
    return value



class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


DATA_CONVERTER_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
CODEC_ENDPOINT_URL = re.compile(r"^https?://[^\s/]+")
_URL_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://[^/?#\s]*@")


def codec_endpoint_problem(value: str) -> str | None:
    """Why ``value`` cannot be a codec server's URL, or None. A URL with credentials in it
    (``user:password@``, ``?token=``) is refused as a connection's inline secret is: it would be
    printed in errors and logs. The message never quotes what it refuses."""
    shown = redact(describe_url(value))
    if _URL_USERINFO.match(value) or embedded_password(value):
        return (f"{shown!r} holds credentials (user:password@): a codec server's URL is printed in errors and logs; "
                "give its Authorization header with --codec-auth or TEMPORAL_CODEC_AUTH (or the profile's codec.auth) "
                "and the URL without them")
    if shown != value:
        return (f"{shown!r} holds a secret in its query: a codec server's URL is printed in errors and logs; "
                "give its Authorization header with --codec-auth or TEMPORAL_CODEC_AUTH instead")
    if not CODEC_ENDPOINT_URL.match(value):
        return f"{shown!r} is not an http:// or https:// URL, e.g. https://codec.example.com"
    return None


DEFAULT_TASK_QUEUE = "wfi-activations"
"""Where activation workflows and their activities run unless a deployment says otherwise."""


class TemporalTarget(_Strict):
    """The deployment's ``temporal:`` section: where activations run (flags, ``TEMPORAL_*`` and a profile win over it)."""

    address: str | None = Field(default=None, description="host:port, when no flag, TEMPORAL_ADDRESS or profile says; "
                                "else localhost:7233.")
    namespace: str = Field(default="default", description="When no flag, TEMPORAL_NAMESPACE or profile says.")
    profile: str | None = Field(default=None, description="The Temporal config file's profile (TLS, API key) when "
                                "neither --profile nor TEMPORAL_PROFILE names one.")
    task_queue: str = Field(default=DEFAULT_TASK_QUEUE, description="Task queue of activation workflows.")
    data_converter: str | None = Field(
        default=None, description="The team's data converter, MODULE:ATTR naming a temporalio DataConverter or "
        "PayloadCodec (or a class or function making one): every client wf-initiation builds uses it.")
    codec_endpoint: str | None = Field(
        default=None, description="A codec server's URL (as `temporal --codec-endpoint`), instead of data_converter.")
    unencoded: Unencoded | None = Field(
        default=None, description="What an activation does with a delivery that reaches it without the team's payload "
        "codec (a bridge that forgot it): 'refuse' (an update is rejected, a signal recorded as refused and not taken), "
        "'record' (taken, recorded as an initiation error) or 'accept'. Unset: 'refuse' when this section names "
        "data_converter or codec_endpoint, else 'accept' (core.unencoded).")

    _names = field_validator("namespace", "task_queue")(_temporal_name)

    @field_validator("data_converter")
    @classmethod
    def _reference(cls, value: str | None) -> str | None:
        if value is not None and not DATA_CONVERTER_REFERENCE.match(value):
            raise ValueError(f"{value!r} is not MODULE:ATTR, e.g. myteam.codec:data_converter")
        return value

    @field_validator("codec_endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        problem = codec_endpoint_problem(value) if value is not None else None
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _one_codec(self) -> TemporalTarget:
        if self.data_converter and self.codec_endpoint:
            raise ValueError("give data_converter or codec_endpoint, not both: one codec encodes every payload")
        return self

    def unencoded_policy(self) -> Unencoded:
        """What the deployment's activations do with a delivery that arrives without the team's codec."""
        return self.unencoded or default_unencoded(bool(self.data_converter or self.codec_endpoint))


class MissedPolicy(_Strict):
    """SCHED-8: exactly one policy per activation."""

    policy: Literal["skip", "catch_up"] = "skip"
    bound: int | None = Field(
        default=None, ge=1, description="catch_up: most missed occurrences admitted at once."
    )

    _b = field_validator("bound")(_at_most(MAX_CATCH_UP_BOUND))
    overflow: Literal["wait_for_operator", "skip_overflow"] = Field(
        default="wait_for_operator",
        description="catch_up beyond bound: hold the omitted range for an operator decision, or skip it (recorded).",
    )

    @model_validator(mode="after")
    def _bound(self) -> MissedPolicy:
        if self.policy == "catch_up" and self.bound is None:
            raise ValueError("catch_up needs a finite 'bound' (SCHED-8), e.g. {policy: catch_up, bound: 10}")
        if self.policy == "skip" and self.bound is not None:
            raise ValueError("'bound' applies only to policy catch_up")
        return self


class PollSettings(_Strict):
    """POLL-2: cadence and backoff are deployment configuration."""

    interval: timedelta = timedelta(seconds=30)
    backoff_initial: timedelta = timedelta(seconds=1)
    backoff_max: timedelta = timedelta(minutes=5)
    limit: int = Field(default=500, ge=1, le=10000, description="Items per poll response.")
    timeout: timedelta = Field(default=timedelta(seconds=60), description="A poll taking longer has failed.")

    _d = field_validator("interval", "backoff_initial", "backoff_max", "timeout", mode="before")(_duration)
    _often = field_validator("interval", "backoff_initial", "backoff_max")(_within(MIN_POLL_INTERVAL))
    _timeout = field_validator("timeout")(_within(timedelta(seconds=1), MAX_POLL_TIMEOUT))

    @model_validator(mode="after")
    def _backoff_order(self, info: ValidationInfo) -> PollSettings:
        if self.backoff_max < self.backoff_initial and _edge(info):
            raise ValueError("backoff_max must be at least backoff_initial")
        return self


class Throttle(_Strict):
    """At most ``runs`` run starts in any window of ``per`` (sliding), for the whole workflow or per
    ``key``; the runs past it wait, in order, and start when the window has room (core.engine._throttle)."""

    runs: int = Field(ge=1, description="Most runs started in any window of `per`.")
    per: timedelta = Field(description="The window's length (sliding: it ends at every instant).")
    key: str | None = Field(default=None, description="An expression over the trigger binding and inputs (as "
                            "`queue_by`): each value has its own window; a fault or null is a key fault.")

    _d = field_validator("per", mode="before")(_duration)
    _per = field_validator("per")(_within(MIN_THROTTLE_PER))
    _runs = field_validator("runs")(_at_most(MAX_THROTTLE_RUNS))

    @field_validator("key")
    @classmethod
    def _expression(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or not _edge(info):
            return value
        if not value.strip():
            raise ValueError('an expression such as "{{ order.customer_id }}", or no key for one window')
        try:
            Evaluator().compile(value)
        except ExpressionSyntaxError as exc:
            raise ValueError(f"{exc}: fix the expression") from None
        return value


MAX_REMAINING_RUNS = 1_000_000_000


class ScheduleOptions(_Strict):
    """What a team knows from Temporal Schedules, for one schedule entry (docs/deployment.md, "Schedule options")."""

    jitter: timedelta = Field(
        default=timedelta(0), description="Admit each occurrence up to this long after its instant, never before it "
        "(SCHED-6): a delay of its own for every occurrence, the same on every replay and restart, and shorter than "
        "the gap to the next occurrence. 0 (the default): at the instant.")
    pause_on_failure: bool = Field(
        default=False, description="A run of the entry that fails or times out pauses the entry's schedule, with a "
        "note naming the run; `wfi operate resume` goes on.")
    remaining_runs: int | None = Field(
        default=None, ge=1, description="The schedule admits this many occurrences by itself (on time or caught up), "
        "then becomes inactive (recorded); backfills and `wfi operate trigger` do not count. None: no limit.")

    _d = field_validator("jitter", mode="before")(_duration)
    _j = field_validator("jitter")(_within())
    _r = field_validator("remaining_runs")(_at_most(MAX_REMAINING_RUNS))


class SchedulePolicy(ScheduleOptions):
    """``schedule:``: the options of every schedule entry of the workflow, and ``entries`` of their own."""

    entries: dict[str, ScheduleOptions] = Field(
        default_factory=dict, description="Entry name -> its own options (keys not given take their defaults, not "
        "the workflow's); a name the Workfile has no schedule entry for is refused.")

    def options(self, entry: str) -> ScheduleOptions:
        """The options that apply to the schedule entry ``entry``."""
        return self.entries.get(entry, self)


WAKE_AHEAD_DEFAULT = timedelta(milliseconds=200)
# Policies added after the first release: left out of the binding hash while at their default, so
# that upgrading does not change the activation id of an unchanged deployment (wf_initiation.core.activation).
ADDED_POLICIES: dict[str, Any] = {"schedule_wake_ahead": WAKE_AHEAD_DEFAULT, "at_capacity": "refuse", "throttle": None,
                                  "schedule": SchedulePolicy()}


class Policies(_Strict):
    """Initiation policies; `defaults` and each workflow may set them."""

    dedup_retention: timedelta = Field(default=timedelta(hours=24), description="EXT-5 retention after terminal.")
    overlap: Overlap = "allow"
    late_after: timedelta = Field(default=timedelta(minutes=1), description="An occurrence later than this is missed.")
    schedule_wake_ahead: timedelta = Field(
        default=WAKE_AHEAD_DEFAULT, ge=timedelta(0), le=timedelta(seconds=5),
        description="Wake this long before each schedule instant, admit the occurrence at its instant and hold the "
        "activation's task until then (its run's start sleeps first): the run begins milliseconds after its instant "
        "instead of after the server's timer and task-dispatch delays. 0 turns it off; at most 5s (the hold delays "
        "updates to this activation).",
    )
    missed: MissedPolicy = MissedPolicy()
    schedule: SchedulePolicy = Field(
        default_factory=SchedulePolicy, description="Jitter, pause_on_failure and remaining_runs of the schedule "
        "entries (docs/deployment.md, \"Schedule options\").")
    invalid_items: Literal["hold", "quarantine"] = Field(default="quarantine", description="POLL-11 choice.")
    poll: PollSettings = PollSettings()
    max_causation_depth: int = Field(default=10, ge=1, description="COMP-6 cycle guard bound.")
    max_concurrent_runs: int | None = Field(default=None, ge=1, description="Cap on running runs (else unlimited).")
    throttle: Throttle | None = Field(default=None, description="Most run starts per window, per workflow or per key "
                                      "(else unlimited); the runs past it wait, in order.")
    lifecycle_events: bool = Field(
        default=True,
        description="Publish workflow.started/completed/failed of this workflow's runs (COMP-3); "
        "false saves an activity per batch of run transitions when nothing listens.",
    )
    max_history_events: int = Field(
        default=8000, ge=200, description="Continue-as-new once the activation's history passes this many events."
    )
    at_capacity: Literal["refuse", "shed_oldest"] = Field(
        default="refuse",
        description="What the activation does when what it carries reaches its capacity (docs/limits.md): 'refuse' "
        "defers deliveries of new ids until retained ids expire (every retention is kept); 'shed_oldest' drops the "
        "dedup entries released longest ago before their retention ends (a redelivery of one of them is then taken as "
        "new; the first instant not covered is recorded).",
    )

    _d = field_validator("dedup_retention", "late_after", "schedule_wake_ahead", mode="before")(_duration)
    _long = field_validator("dedup_retention", "late_after")(_within())
    _depth = field_validator("max_causation_depth")(_at_most(MAX_CAUSATION_DEPTH))
    _runs = field_validator("max_concurrent_runs")(_at_most(MAX_CONCURRENT_RUNS))
    _history = field_validator("max_history_events")(_at_most(MAX_HISTORY_EVENTS))


class RunTarget(_Strict):
    """A workflow's ``run:`` section: the workflow type and task queue each run executes on."""

    workflow_type: str = Field(description="Workflow type each run executes.")
    task_queue: str = Field(description="Task queue of the run workflows.")
    execution_timeout: timedelta | None = None

    _d = field_validator("execution_timeout", mode="before")(lambda v: None if v is None else _duration(v))
    _bounded = field_validator("execution_timeout")(_within(timedelta(seconds=1)))
    _names = field_validator("workflow_type", "task_queue")(_temporal_name)


class Scale(_Strict):
    """How many Temporal workflows one activation spans (docs/limits.md, "scale")."""

    shards: int = Field(
        default=1, ge=1, le=MAX_SHARDS,
        description="Activation workflows taking this workflow's external deliveries, each by its delivery id "
        "(a power of two): each carries its own capacity of retained ids and takes its own share of deliveries. "
        "Schedules, polls and lifecycle entries stay on the first.",
    )

    grow_at: float | None = Field(
        default=None, gt=0, lt=1,
        description="Grow automatically: when the fullest shard's carried state passes this fraction of its "
        "capacity (0.8: 80%), the activation doubles its shards by the same split `wfi activate` makes, up to "
        "max_shards (docs/deployment.md, \"An activation that grows itself\").",
    )
    max_shards: int | None = Field(
        default=None, ge=1, le=MAX_SHARDS,
        description="With grow_at: the most shards the activation grows to (a power of two, at least shards).",
    )

    @field_validator("shards", "max_shards")
    @classmethod
    def _power_of_two(cls, n: int | None) -> int | None:
        if n is not None and n & (n - 1):
            raise ValueError(f"must be a power of two (1, 2, 4, ... {MAX_SHARDS}), not {n}")
        return n

    @model_validator(mode="after")
    def _growth(self) -> Scale:
        if self.grow_at is not None and self.max_shards is None:
            raise ValueError("scale.grow_at needs scale.max_shards: the most shards the activation may grow to "
                             f"(a power of two from {max(self.shards * 2, 2)} to {MAX_SHARDS})")
        if self.max_shards is not None and self.grow_at is None:
            raise ValueError("scale.max_shards bounds automatic growth, which scale.grow_at turns on: set grow_at "
                             "(e.g. 0.8) or remove max_shards")
        if self.max_shards is not None and self.max_shards < self.shards:
            raise ValueError(f"scale.max_shards ({self.max_shards}) is below scale.shards ({self.shards}): an "
                             "activation is never merged into fewer shards; raise max_shards")
        return self


class WorkflowDeployment(Policies):
    """One ``workflows.<name>:`` section merged over ``defaults:``: its Workfile, run target, inputs and policies."""

    workfile: str | None = Field(default=None, description="Path of the Workfile (relative to the deployment file).")
    scale: Scale = Field(default_factory=Scale, description="Spread the activation over several workflows (docs/limits.md).")
    run: RunTarget
    inputs: dict[str, Any] = Field(default_factory=dict, description="Deployment inputs (binding member).")
    overlay: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Per-entry configuration overlay: entry name -> keys replacing the Workfile's."
    )


class Deployment(_Strict):
    """A deployment file: where and how a set of Workfiles is activated (every key: docs/deployment.md).

    Load one with :func:`load_deployment` (a file) or :func:`parse_deployment` (parsed data).
    """

    temporal: TemporalTarget = TemporalTarget()
    capabilities: list[str] = Field(default_factory=lambda: list(ALL_CAPABILITIES))
    defaults: dict[str, Any] = Field(default_factory=dict)
    connections: dict[str, Connection] = Field(default_factory=dict)
    workflows: dict[str, dict[str, Any]] = Field(default_factory=dict)
    ingress: IngressConfig | None = Field(default=None, description="HTTP webhook ingress (`wfi serve`): docs/webhooks.md.")
    base_dir: str | None = Field(default=None, description="Directory relative paths resolve against.")

    @field_validator("capabilities")
    @classmethod
    def _known(cls, caps: list[str]) -> list[str]:
        unknown = sorted(set(caps) - set(ALL_CAPABILITIES))
        if unknown:
            raise ValueError(f"unknown capability {unknown}; known: {', '.join(ALL_CAPABILITIES)}")
        return caps

    def workflow(self, name: str) -> WorkflowDeployment:
        """The merged deployment settings of one workflow; DiagnosticError naming the fix."""
        if name not in self.workflows:
            raise DiagnosticError([Diagnostic(
                code="DEPLOY-UNKNOWN-WORKFLOW",
                message=f"the deployment has no 'workflows: {name}:' section; add one with at least "
                f"run: {{workflow_type: ..., task_queue: ...}} (known: {', '.join(sorted(self.workflows)) or 'none'})",
            )])
        merged = {**self.defaults, **self.workflows[name]}
        try:
            return WorkflowDeployment.model_validate(merged, context=BOUNDED)
        except ValidationError as exc:
            raise DiagnosticError(_diagnostics(exc, f"workflows.{name}")) from None

    def connections_for(self, connector: str) -> dict[str, Connection]:
        """The connections that serve ``connector`` (by its prefix or full name)."""
        return {k: c for k, c in self.connections.items() if c.serves(connector)}

    def resolve_path(self, path: str) -> pathlib.Path:
        """``path`` resolved against the deployment file's directory (an absolute path as it is)."""
        p = pathlib.Path(path)
        return p if p.is_absolute() or not self.base_dir else pathlib.Path(self.base_dir) / p


def load_deployment(path: str | pathlib.Path) -> Deployment:
    """Read and validate a deployment file; DiagnosticError (never a traceback) on bad input.

    Bounded like a Workfile: at most :data:`MAX_FILE_BYTES`, nested at most 64 deep, and at most
    100,000 nodes when aliases are expanded (an alias bomb is refused before anything walks it).
    """
    p = pathlib.Path(path)
    try:
        if p.stat().st_size > MAX_FILE_BYTES:
            raise _refused(f"{p} is larger than {MAX_FILE_BYTES:,} bytes: a deployment file is configuration, keep it small")
        data = YAML(typ="safe").load(p.read_text(encoding="utf-8"))
        check_depth(data)
    except OSError as exc:
        raise DiagnosticError([Diagnostic(code="DEPLOY-UNREADABLE", message=f"cannot read {p}: {exc.strerror}")]) from None
    except UnicodeDecodeError as exc:
        raise _refused(f"{p} is not UTF-8 text ({exc.reason}): save it as UTF-8") from None
    except YamlTooDeep as exc:
        raise _refused(f"{p}: {exc}") from None
    except RecursionError:
        raise _refused(f"{p} nests too deeply: keep it under 64 levels") from None
    except (YAMLError, ValueError, TypeError, AttributeError) as exc:  # ruamel reports some bad input as plain errors
        if "integer string conversion" in str(exc):
            raise _refused(f"{p} holds a number with more than 4,300 digits: no setting takes one") from None
        raise _refused(f"{p} is not valid YAML: {_first_line(exc)}") from None
    return parse_deployment(data or {}, base_dir=str(p.resolve().parent))


def _refused(message: str) -> DiagnosticError:
    return DiagnosticError([Diagnostic(code="DEPLOY-YAML", message=message)])


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return " ".join(lines[:3])[:300] if lines else type(exc).__name__


def parse_deployment(data: Any, *, base_dir: str | None = None) -> Deployment:
    """Validate a deployment already parsed from YAML or JSON.

    Args:
        data: The document (a mapping).
        base_dir: The directory relative paths (``workfile:``) resolve against.

    Raises:
        DiagnosticError: the document is not a valid deployment; each diagnostic names the fix.
    """
    if not isinstance(data, dict):
        raise DiagnosticError([Diagnostic(code="DEPLOY-SHAPE", message="a deployment file is a mapping at top level")])
    try:
        dep = Deployment.model_validate({**data, "base_dir": base_dir}, context=BOUNDED)
        Policies.model_validate(dep.defaults, context=BOUNDED)
    except ValidationError as exc:
        raise DiagnosticError(_diagnostics(exc, "")) from None
    for name in dep.workflows:
        dep.workflow(name)
    return dep


def _diagnostics(exc: ValidationError, prefix: str) -> list[Diagnostic]:
    out = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in (prefix, *e["loc"]) if p != "")
        message = str(e["msg"]).removeprefix("Value error, ")
        out.append(Diagnostic(code="DEPLOY-INVALID", message=f"{loc}: {message}", path=loc))
    return out
