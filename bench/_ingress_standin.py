"""``wfi serve``'s app and server with Temporal replaced by a stand-in: the ceiling of the ingress.

    .venv/bin/python bench/_ingress_standin.py --deployment PATH --port P --base-ms A --per-ms B

Serves the deployment's ingress exactly as ``wfi serve`` does (uvicorn with the ingress's
connection guard, Starlette, authentication, payload checks, the gates, ``WfiClient``'s grouping),
except that nothing reaches Temporal: each grouped ``deliver_many`` update is answered, every
delivery ``suppressed``, after ``A + B * n`` ms for a group of ``n`` (``bench_ingress.py`` passes the
round trips it measured on its own server), and the client's first-call checks (the history's
codec, the shard count) are skipped. What this process then serves per second is the most the
ingress could serve against a Temporal that answered each group as fast as the real one, on this
machine, with the server and workers idle (issue 19 item 3: ``bench/README.md``). Prints
``ready`` once it listens. A bench helper, not a test double: no test uses it.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wf_initiation._sharded_client import ShardedCalls  # noqa: E402
from wf_initiation.client import WfiClient  # noqa: E402
from wf_initiation.core.engine import DeliveryResult, Disposition  # noqa: E402
from wf_initiation.ingress._app import build_app  # noqa: E402
from wf_initiation.ingress._connections import limits_for  # noqa: E402
from wf_initiation.ingress._factory import build  # noqa: E402
from wf_initiation.ingress._server import IngressServer  # noqa: E402
from wf_initiation.wire import DeliveryRequest  # noqa: E402


def stand_in(base_ms: float, per_ms: float) -> None:
    """Patch ``WfiClient`` in this process: groups answered after the round trip, no first-call checks."""

    async def send_grouped(self: ShardedCalls, key: str, chunk: list[DeliveryRequest]) -> list[DeliveryResult]:
        await asyncio.sleep((base_ms + per_ms * len(chunk)) / 1000)
        return [DeliveryResult(entry=r.entry, delivery_id=None, disposition=Disposition.SUPPRESSED,
                               activation_id="stand-in") for r in chunk]

    async def checked(self: WfiClient, workflow: str) -> None:
        return None

    async def unsharded(self: ShardedCalls, workflow: str) -> bool:
        return False

    ShardedCalls.send_grouped = send_grouped  # type: ignore[method-assign]
    WfiClient._check_codec = checked  # type: ignore[method-assign]
    ShardedCalls.has_shards = unsharded  # type: ignore[method-assign]


async def serve(args: argparse.Namespace) -> None:
    stand_in(args.base_ms, args.per_ms)
    ingress = build(args.deployment, client=object())  # never used: the patched calls reach no server
    await IngressServer.start(build_app(ingress), "127.0.0.1", args.port, limits=limits_for(ingress.config),
                              refusals=ingress.refusals, gauge=ingress.metrics.connections)  # as wfi serve's
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployment", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--base-ms", type=float, required=True, help="a group's round trip: A + B * its size (ms)")
    parser.add_argument("--per-ms", type=float, required=True)
    asyncio.run(serve(parser.parse_args()))
