"""The conformance kit's frame: cases and the runner (the target they drive: :mod:`.target`; their checks: :mod:`.checks`).

A conformance case is a black-box check of a live deployment. It may touch only the deployment's
public interfaces, all reached through :class:`Target`: the ``wfi`` command line as a subprocess,
the Temporal client API against the deployment's Temporal target, and files in a scratch
directory. Each case names the rules of ``docs/specification.md`` it proves and the capability it
belongs to, so one case serves both the project's own test suite and ``wfi conformance run``.

A case module declares its cases with :func:`case` and lists them, explicitly, in a module-level
``CASES`` tuple; :func:`collect` reads those tuples::

    @case(capability=EXTERNAL, clauses=["EXT-3"])
    async def duplicate_delivery_starts_no_second_run(target: Target) -> None:
        ...

    CASES = (duplicate_delivery_starts_no_second_run,)
"""

from __future__ import annotations

import asyncio
import importlib
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from wf_initiation.errors import WfiError

from .checks import CaseFailed, check, eventually, one_line
from .report import CLAIMABLE as CAPABILITIES
from .report import CORE, CaseResult, Outcome, Report, build_report
from .target import CliResult, Target, WorkfilePair

__all__ = [  # what a case module imports from here
    "CAPABILITIES", "CORE", "EXTERNAL", "POLLING", "SCHEDULED", "CaseFailed", "CaseFn", "CaseInfo", "CliResult",
    "Interrupted", "Target", "WorkfilePair", "case", "check", "collect", "eventually", "one_line", "run_cases", "select",
]

SCHEDULED, EXTERNAL, POLLING = CAPABILITIES
# CORE is the pseudo-capability of cross-cutting cases (capability inference, the core validator).
# It is never claimed itself; every real capability's claim requires all core cases to pass.

CaseFn = Callable[[Target], Awaitable[None]]


class Interrupted(WfiError):
    """The run was cancelled (SIGINT, SIGTERM) during case ``case_id``; what that case had started was
    cleaned up (``cleanup`` says what was done)."""

    def __init__(self, case_id: str, cleanup: str, results: Sequence[CaseResult]) -> None:
        super().__init__(f"interrupted during {case_id}; {cleanup or 'nothing of it was left running'}")
        self.case_id, self.cleanup, self.results = case_id, cleanup, list(results)


@dataclass(frozen=True)
class CaseInfo:
    """One registered case: what it proves, for which capability, and the check itself."""

    id: str
    capability: str
    clauses: tuple[str, ...]
    title: str
    fn: CaseFn = field(repr=False, compare=False)


def case(*, capability: str, clauses: Sequence[str], title: str | None = None) -> Callable[[CaseFn], CaseInfo]:
    """Declare an async function as a conformance case.

    Args:
        capability: One of :data:`CAPABILITIES`, or :data:`CORE` for cross-cutting cases.
        clauses: Rule ids of ``docs/specification.md`` the case proves, e.g. ``["EXT-3", "EXT-13"]``.
        title: A sentence for the report; defaults to the function name with spaces.

    Returns:
        A decorator turning ``async def name(target) -> None`` into a :class:`CaseInfo` whose id is
        ``<module's last component>.<function name>``. List it in the module's ``CASES``.
    """
    if capability not in (*CAPABILITIES, CORE):
        raise ValueError(f"capability {capability!r} is not one of {', '.join((*CAPABILITIES, CORE))}")
    if not clauses:
        raise ValueError("a conformance case must name at least one clause it proves")

    def decorate(fn: CaseFn) -> CaseInfo:
        module = fn.__module__.rsplit(".", 1)[-1]
        return CaseInfo(
            id=f"{module}.{fn.__name__}",
            capability=capability,
            clauses=tuple(clauses),
            title=title or fn.__name__.replace("_", " "),
            fn=fn,
        )

    return decorate


def collect(modules: Iterable[str]) -> tuple[CaseInfo, ...]:
    """Import each case module and return the cases of its ``CASES`` tuple, in order.

    Raises:
        ValueError: a module declares a case it does not list in ``CASES``, or two cases share an id.
    """
    cases: list[CaseInfo] = []
    for name in modules:
        module = importlib.import_module(name)
        listed = tuple(getattr(module, "CASES", ()))
        declared = {v.id for v in vars(module).values() if isinstance(v, CaseInfo)}
        missing = sorted(declared - {c.id for c in listed})
        if missing:
            raise ValueError(f"{name} declares cases it does not list in CASES: {', '.join(missing)}")
        cases.extend(listed)
    ids = [c.id for c in cases]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError(f"duplicate conformance case ids: {', '.join(dupes)}")
    return tuple(cases)


def select(cases: Sequence[CaseInfo], *, ids: Iterable[str] = (), capabilities: Iterable[str] = ()) -> set[str]:
    """Ids of the cases chosen by explicit ids and/or capabilities (a capability brings in CORE).

    Raises:
        ValueError: an id or capability names nothing; the message lists what exists.
    """
    known = {c.id for c in cases}
    wanted, caps = set(ids), set(capabilities)
    unknown = sorted(wanted - known)
    if unknown:
        raise ValueError(f"unknown case id {', '.join(unknown)}; `wfi conformance list` shows the cases")
    bad_caps = sorted(caps - set(CAPABILITIES) - {CORE})
    if bad_caps:
        raise ValueError(f"unknown capability {', '.join(bad_caps)}; known: {', '.join((*CAPABILITIES, CORE))}")
    if caps:
        caps.add(CORE)
    return wanted | {c.id for c in cases if c.capability in caps}


async def run_cases(
    target: Target, cases: Sequence[CaseInfo], *, only: set[str] | None = None, timeout: float = 120,
    on_result: Callable[[CaseResult], None] | None = None,
) -> Report:
    """Run the selected cases one after another and report per capability.

    Args:
        target: The deployment under test.
        cases: Every case of the kit; the report judges claims against all of them.
        only: Ids to run; the others are reported as not run (and so block their capability's claim).
        timeout: Seconds each case may take before it fails.
        on_result: Called with each case's result as soon as it has one (cleanup included), in
            order, for the cases that run: ``wfi conformance run`` prints them as they come.

    Raises:
        Interrupted: the call was cancelled; the running case's activations were deactivated and
            what it started terminated first (:meth:`Target.cleanup`).
    """
    results: list[CaseResult] = []
    for info in cases:
        if only is not None and info.id not in only:
            results.append(_result(info, "skipped", "not selected"))
            continue
        try:
            results.append(await _run_one(target, info, timeout))
        except asyncio.CancelledError:
            # Cancelled (``wfi conformance run`` on SIGINT/SIGTERM): what the case started is deactivated.
            raise Interrupted(info.id, await target.cleanup(), results) from None
        if on_result is not None:
            on_result(results[-1])
    return build_report(results, deployment=str(target.deployment_path), generated_at=datetime.now(UTC))


async def _run_one(target: Target, info: CaseInfo, timeout: float) -> CaseResult:
    """Run one case, then clean up after it whatever its outcome (timeouts and crashes included).

    The message is one readable line; a failed check's further lines (a command's output) go to
    ``detail``; a crash is reported as its exception and where it was raised, never a traceback."""
    started = time.monotonic()
    outcome: Outcome = "passed"
    message = detail = ""
    try:
        await asyncio.wait_for(info.fn(target), timeout)
    except CaseFailed as exc:
        outcome = "failed"
        message, _, detail = str(exc).strip().partition("\n")
    except TimeoutError:
        outcome, message = "failed", f"did not finish within {timeout:g}s"
    except Exception as exc:  # noqa: BLE001 - a crashing case is a reported failure, never an abort of the run
        outcome, message = "error", one_line(exc)
    duration = time.monotonic() - started
    cleanup = await target.cleanup()
    return _result(info, outcome, message, duration, detail=detail.strip(), cleanup=cleanup)


def _result(info: CaseInfo, outcome: Outcome, message: str, duration_s: float = 0.0, *, detail: str = "",
            cleanup: str = "") -> CaseResult:
    return CaseResult(
        id=info.id, capability=info.capability, clauses=list(info.clauses), title=info.title,
        outcome=outcome, message=message, detail=detail, cleanup=cleanup, duration_s=round(duration_s, 3),
    )
