"""The deployment under test as a case sees it (:class:`Target`): the ``wfi`` command line as a
subprocess, the Temporal client API against the deployment's Temporal target, and files in a
scratch directory; what it started, ended after every case (:meth:`Target.cleanup`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pathlib
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML

import wf_initiation._temporal as _temporal  # the connection, as every wfi command makes it
from wf_initiation.core.deployment import Deployment, load_deployment
from wf_initiation.errors import WfiError
from wf_initiation.wire import ACTIVATION_ID_PREFIX  # the workflow id webhook bridges address (README)

from .checks import CaseFailed, check, eventually, one_line

CLEANUP_TIMEOUT = 120.0


@dataclass(frozen=True)
class CliResult:
    """What one ``wfi`` subprocess did."""

    args: tuple[str, ...]
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """stdout parsed as JSON (one document, or one document per line); CaseFailed if it is not."""
        try:
            return json.loads(self.stdout)
        except ValueError:
            pass
        not_json = CaseFailed(f"`wfi {' '.join(self.args)}` did not print JSON:\n{self.describe()}")
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        if not lines:
            raise not_json
        try:
            return [json.loads(line) for line in lines]
        except ValueError:
            raise not_json from None

    def describe(self) -> str:
        """A readable account of the call for failure messages."""
        return f"exit {self.code}\n--- stdout\n{self.stdout.strip()}\n--- stderr\n{self.stderr.strip()}"


@dataclass(frozen=True)
class WorkfilePair:
    """A Workfile and a deployment file that activates it, written by :meth:`Target.write_pair`."""

    workflow: str
    workfile: pathlib.Path
    deployment: pathlib.Path


def default_wfi_command() -> tuple[str, ...]:
    """The ``wfi`` console script beside this interpreter, else ``python -c`` into ``wfi.cli.main``."""
    script = pathlib.Path(sys.executable).parent / "wfi"
    if script.exists():
        return (str(script),)
    return (sys.executable, "-c", "import sys; from wf_initiation.cli import main; sys.exit(main(sys.argv[1:]))")


@dataclass
class Target:
    """Everything a case may touch: the deployment under test and its public interfaces.

    Build one with :meth:`from_file`. A target holds one Temporal client, connected on first use
    with ``flags`` (the connection flags of ``wfi conformance run``) over the environment, the
    profile and the deployment's ``temporal`` section; every ``wfi`` it runs gets the flags as
    ``TEMPORAL_*`` variables, so it reaches the same Temporal. Every name :meth:`unique` makes starts with the target's :attr:`tag`, so whatever a case
    starts (activations, runs, waiting workflows) can be found and ended by :meth:`cleanup`.
    """

    deployment_path: pathlib.Path
    deployment: Deployment
    workdir: pathlib.Path
    wfi_command: tuple[str, ...] = field(default_factory=default_wfi_command)
    env: Mapping[str, str] | None = None
    flags: _temporal.ConnectFlags = field(default_factory=_temporal.ConnectFlags)
    cli_timeout: float = 60.0
    tag: str = field(default_factory=lambda: f"wfc{uuid.uuid4().hex[:8]}")
    _client: Any = field(default=None, init=False, repr=False)
    _pairs: dict[str, pathlib.Path] = field(default_factory=dict, init=False, repr=False)
    _run_types: dict[str, tuple[str, str]] = field(default_factory=dict, init=False, repr=False)
    _served: dict[tuple[str, str], str | None] = field(default_factory=dict, init=False, repr=False)

    @classmethod
    def from_file(cls, deployment_path: str | pathlib.Path, workdir: str | pathlib.Path, **kwargs: Any) -> Target:
        """Load the deployment file (``DiagnosticError`` when it is bad) and make ``workdir``."""
        path = pathlib.Path(deployment_path).resolve()
        work = pathlib.Path(workdir).resolve()
        work.mkdir(parents=True, exist_ok=True)
        return cls(deployment_path=path, deployment=load_deployment(path), workdir=work, **kwargs)

    async def wfi(self, *args: str, input: str | None = None) -> CliResult:
        """Run ``wfi ARGS...`` as a subprocess in :attr:`workdir` and return what it did. Before
        ``wfi activate`` of a pair :meth:`write_pair` wrote, CaseFailed unless a worker runs its run type."""
        if args[:1] == ("activate",) and "--deployment" in args[:-1]:
            run = self._run_types.get(args[args.index("--deployment") + 1])
            if run is not None:
                await self.require_workflow_type(*run)
        proc = await asyncio.create_subprocess_exec(
            *self.wfi_command, *args,
            stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            cwd=self.workdir, env=self._child_env(),
        )
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(input.encode() if input is not None else None), self.cli_timeout
            )
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise CaseFailed(f"`wfi {' '.join(args)}` did not finish within {self.cli_timeout:g}s") from None
        except asyncio.CancelledError:  # the run is interrupted: this command is not left behind
            proc.kill()
            await proc.wait()
            raise
        return CliResult(args=tuple(args), code=proc.returncode or 0, stdout=out.decode(), stderr=err.decode())

    def _child_env(self) -> dict[str, str]:
        """The environment of a ``wfi`` this target runs: the flags as ``TEMPORAL_*`` variables (a
        ``--data-converter`` is written into each pair's deployment instead, where no codec variable
        may win over it), and the team's codec module importable as it is here."""
        env = {**os.environ, **_temporal.flag_environment(self.flags)}
        if self.flags.data_converter:
            env.pop("TEMPORAL_CODEC_ENDPOINT", None)
        if self.flags.data_converter or self.deployment.temporal.data_converter:
            path = [str(self.deployment_path.parent), os.getcwd(), env.get("PYTHONPATH", "")]
            env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
        return {**env, **(self.env or {})}

    async def client(self) -> Any:
        """A ``temporalio.client.Client`` for the deployment's Temporal target, connected as ``wfi``
        connects (the team's codec included)."""
        if self._client is None:
            self._client = await _temporal.connect(self.deployment, self.flags)
        return self._client

    @property
    def connected(self) -> bool:
        """Whether :meth:`client` has connected (and so started the Temporal runtime)."""
        return self._client is not None

    def unique(self, prefix: str) -> str:
        """A name no other case run uses: for workflow identities, workflow ids, task queues.

        It starts with :attr:`tag`: a workflow started with it as (the start of) its id is ended
        by :meth:`cleanup` if the case leaves it running."""
        return f"{self.tag}-{prefix}-{uuid.uuid4().hex[:12]}"

    def write(self, name: str, text: str) -> pathlib.Path:
        """Write ``text`` to ``workdir/name`` and return the path."""
        path = self.workdir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def write_pair(self, workflow: str, workfile_text: str, settings: Mapping[str, Any]) -> WorkfilePair:
        """Write a Workfile and a deployment that activates it on this target's Temporal.

        The new deployment copies this one's ``temporal``, ``capabilities`` and ``defaults`` and
        declares one workflow section, ``settings`` plus the Workfile's path. Not its
        ``connections``: the kit's Workfiles need none of the operator's credentials, and two
        connections of one connector would make every Workfile that names none ambiguous (TRIG-6);
        a case that needs a connection adds its own. :meth:`cleanup` deactivates the workflow.

        Args:
            workflow: The Workfile's ``name`` (use :meth:`unique`), also the deployment section.
            workfile_text: The Workfile's YAML.
            settings: The ``workflows.<workflow>`` section, at least ``run: {workflow_type, task_queue}``.
        """
        workfile = self.write(f"{workflow}.workfile.yaml", workfile_text)
        doc = self.deployment.model_dump(mode="json", include={"temporal", "capabilities", "defaults"}, exclude_unset=True)
        if self.flags.data_converter:
            doc["temporal"] = {**doc.get("temporal", {}), "data_converter": self.flags.data_converter}
            doc["temporal"].pop("codec_endpoint", None)
        doc["workflows"] = {workflow: {**settings, "workfile": str(workfile)}}
        deployment = self.workdir / f"{workflow}.deployment.yaml"
        with deployment.open("w") as fh:
            YAML(typ="safe", pure=True).dump(doc, fh)
        self._pairs[workflow] = deployment
        run = settings.get("run")
        # The runs on the deployment's queue need its worker to run them; elsewhere a case wants them only started.
        if isinstance(run, Mapping) and run.get("workflow_type") and run.get("task_queue") == self.deployment.temporal.task_queue:
            self._run_types[str(deployment)] = (str(run["workflow_type"]), str(run["task_queue"]))
        return WorkfilePair(workflow=workflow, workfile=workfile, deployment=deployment)

    async def require_workflow_type(self, workflow_type: str, task_queue: str, *, timeout: float = 20.0) -> None:
        """CaseFailed naming ``workflow_type`` unless a worker on ``task_queue`` runs it (asked once per
        target: a probe workflow of that type, whose first task says whether the worker knows it).

        The kit's runs are its sample run workflows (``wfi.EchoRun``, ``wfi.WaitForExample``): a worker
        without them would take every activation and then never start a run, and each case would
        time out saying only that no run started."""
        key = (task_queue, workflow_type)
        problem = self._served[key] if key in self._served else await self._probe(workflow_type, task_queue, timeout)
        if self.connected:  # not connected: Temporal was not asked, ask again next time
            self._served[key] = problem
        check(problem is None, problem or "")

    async def _probe(self, workflow_type: str, task_queue: str, timeout: float) -> str | None:
        from datetime import timedelta

        from temporalio.service import RPCError

        try:
            client = await self.client()
            handle = await client.start_workflow(workflow_type, id=self.unique("probe"), task_queue=task_queue,
                                                 execution_timeout=timedelta(seconds=timeout + 30))
        except (WfiError, RPCError):
            return None  # Temporal cannot be asked: the case's own command says so, in its words
        try:
            verdict = await eventually(lambda: _first_task(handle, client.data_converter), lambda v: v is not None,
                                       f"a worker on task queue {task_queue!r} to run a first task of {workflow_type}",
                                       timeout=timeout)
        except CaseFailed:
            verdict = None  # no answer yet (no worker, or a loaded one): the case goes on and says what it sees
        finally:
            await _terminate_quietly(handle)
        if verdict == "missing":
            return (f"the worker on task queue {task_queue!r} does not register the workflow type {workflow_type!r}, "
                    "which the kit's runs use (its sample run workflows wfi.EchoRun and wfi.WaitForExample): start "
                    "that worker with WfiPlugin(sample_runs=True) (`wfi up` and `wfi worker` register them)")
        return None

    async def cleanup(self, timeout: float = CLEANUP_TIMEOUT) -> str:
        """Leave nothing of the last case running; returns what was done (empty when nothing was).

        Each activation of a Workfile written by :meth:`write_pair` is deactivated with
        ``wfi deactivate --cancel-queued --running terminate --wait`` (its queued work dropped, its
        runs terminated, the activation workflow completed). Then every workflow still running
        whose id starts with :attr:`tag` (runs, workflows the case started, an activation
        ``wfi deactivate`` could not end) is terminated. Never raises: a problem is reported.
        """
        pairs, self._pairs = self._pairs, {}
        if not pairs and not self.connected:
            return ""  # the case touched no Temporal (e.g. validator-only cases)
        try:
            return await asyncio.wait_for(self._cleanup(pairs), timeout)
        except asyncio.CancelledError:
            self._pairs.update(pairs)  # interrupted: the next cleanup deactivates them
            raise
        except TimeoutError:
            return f"cleanup problem: not finished within {timeout:g}s"
        except Exception as exc:  # noqa: BLE001 - reported in the case's result, never an abort of the run
            return f"cleanup problem: {one_line(exc)}"

    async def _cleanup(self, pairs: dict[str, pathlib.Path]) -> str:
        outcomes = await asyncio.gather(*(self._deactivate(name, path) for name, path in pairs.items()))
        deactivated = sum(o is True for o in outcomes)
        problems = [o for o in outcomes if isinstance(o, str)]
        swept = await self._sweep()
        parts = [f"deactivated {deactivated} activation(s)"] if deactivated else []
        if swept:
            parts.append(f"terminated {len(swept)} workflow(s) left running: {', '.join(swept[:5])}"
                         + (" ..." if len(swept) > 5 else ""))
        parts.extend(f"cleanup problem: {p}" for p in problems)
        return "; ".join(parts)

    async def _deactivate(self, workflow: str, deployment: pathlib.Path) -> bool | str | None:
        """True when deactivated, None when there was no running activation, else the problem."""
        from temporalio.client import WorkflowExecutionStatus
        from temporalio.service import RPCError, RPCStatusCode

        try:
            desc = await (await self.client()).get_workflow_handle(ACTIVATION_ID_PREFIX + workflow).describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        if desc.status != WorkflowExecutionStatus.RUNNING:
            return None
        wait = max(self.cli_timeout - 15, 10)
        result = await self.wfi("deactivate", "--workflow", workflow, "--deployment", str(deployment),
                                "--cancel-queued", "--running", "terminate", "--wait", "--timeout", f"{wait:g}")
        if result.code == 0:
            return True
        said = (result.stderr.strip() or result.stdout.strip()).splitlines()
        return f"`wfi deactivate --workflow {workflow}` exited {result.code}: {said[-1] if said else 'no output'}"

    async def _sweep(self, timeout: float = 60.0) -> list[str]:
        """Terminate every running workflow of this target until visibility lists none."""
        from temporalio.service import RPCError, RPCStatusCode

        client = await self.client()
        query = (f"ExecutionStatus = 'Running' AND (WorkflowId STARTS_WITH '{self.tag}' "
                 f"OR WorkflowId STARTS_WITH '{ACTIVATION_ID_PREFIX}{self.tag}')")
        ended: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            found = [wf.id async for wf in client.list_workflows(query)]
            if not found:
                return ended
            check(time.monotonic() < deadline, f"still running after {timeout:g}s of cleanup: {', '.join(found[:5])}")
            for workflow_id in found:
                try:
                    await client.get_workflow_handle(workflow_id).terminate(reason="conformance kit cleanup")
                except RPCError as exc:
                    if exc.status != RPCStatusCode.NOT_FOUND:  # already closed: visibility lags behind
                        raise
                if workflow_id not in ended:
                    ended.append(workflow_id)
            await asyncio.sleep(0.3)  # pacing of a deadline loop over visibility


    async def cli_json(self, *args: str) -> Any:
        """``wfi ARGS... --json``; CaseFailed naming the command unless it exits 0."""
        result = await self.wfi(*args, "--json")
        check(result.code == 0, f"`wfi {' '.join(args[:2])}` failed:\n{result.describe()}")
        return result.json()

    async def activate(self, pair: WorkfilePair) -> Any:
        return await self.cli_json("activate", str(pair.workfile), "--deployment", str(pair.deployment))

    async def state(self, pair: WorkfilePair, *, events: bool = False) -> dict[str, Any]:
        """The activation's full state through ``wfi state`` (with every dedup entry when ``events``)."""
        extra = ("--events",) if events else ()
        return await self.cli_json("state", "--workflow", pair.workflow, "--deployment", str(pair.deployment), *extra)

    async def operate(self, pair: WorkfilePair, *args: str) -> Any:
        return await self.cli_json("operate", *args, "--workflow", pair.workflow, "--deployment", str(pair.deployment))

    async def run_started(self, run_key: str) -> tuple[Any, dict[str, Any]] | None:
        """(start time, input) of a run, read from its first history event; None while it does not exist."""
        from temporalio.service import RPCError, RPCStatusCode

        handle = (await self.client()).get_workflow_handle(run_key)
        try:
            desc = await handle.describe()
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                return None
            raise
        history = await handle.fetch_history()
        attrs = history.events[0].workflow_execution_started_event_attributes
        converter = (await self.client()).data_converter  # the team's codec decodes it
        return desc.start_time, (await converter.decode(list(attrs.input.payloads)))[0]


NOT_REGISTERED = "is not registered on this worker"  # the SDK's words for a workflow type it does not run


async def _first_task(handle: Any, converter: Any) -> str | None:
    """"missing" when the workflow's first task failed because its type is not registered, "ran"
    when a task completed (or failed for another reason), None while no worker has answered. A
    failure whose message the team's failure converter encoded is decoded with ``converter``."""
    from temporalio.api.enums.v1 import EventType

    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
            failure = event.workflow_task_failed_event_attributes.failure
            failed = failure.message
            if failure.HasField("encoded_attributes"):
                with contextlib.suppress(Exception):  # undecodable: judged by what is in the clear
                    failed = str(await converter.decode_failure(failure))
            return "missing" if NOT_REGISTERED in failed else "ran"
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return "ran"
    return None


async def _terminate_quietly(handle: Any) -> None:
    from temporalio.service import RPCError

    try:
        await handle.terminate(reason="conformance kit: probe of the worker's workflow types")
    except RPCError:
        pass  # already closed (it failed at once, or timed out): nothing left running
