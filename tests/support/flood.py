"""A flood of slow connections, run as a process of its own so that neither its descriptors nor its
CPU are the test's:

    python -m tests.support.flood HOST PORT CONNECTIONS SECONDS PATH

Each of CONNECTIONS tasks keeps one connection open for SECONDS and opens a new one whenever the
server closes it: a third send nothing, a third trickle a request head (one byte a second), a third
send a whole head announcing a 100 kB body and trickle the body (one byte a second). It prints one
JSON line when done: connections opened, closed by the server, with an answer, refused at connect.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys

PACE = 1.0  # seconds between two bytes of a trickling sender: the attack's own pacing


async def flood(host: str, port: int, connections: int, seconds: float, path: str) -> dict[str, int]:
    stats = {"opened": 0, "closed_by_server": 0, "answered": 0, "connect_failed": 0, "open_at_end": 0}
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    heads = {
        0: b"",
        1: f"POST {path} HTTP/1.1\r\nHost: flood\r\nContent-Type: application/json\r\nX-Slow: ".encode(),
        2: f"POST {path} HTTP/1.1\r\nHost: flood\r\nContent-Type: application/json\r\nIdempotency-Key: f\r\n"
           f"Content-Length: 100000\r\n\r\n".encode(),
    }

    async def one(kind: int) -> None:
        while loop.time() < end:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5)
            except (TimeoutError, OSError):
                stats["connect_failed"] += 1
                await asyncio.sleep(PACE)
                continue
            stats["opened"] += 1
            try:
                if heads[kind]:
                    writer.write(heads[kind])
                while loop.time() < end:
                    try:
                        data = await asyncio.wait_for(reader.read(4096), PACE)
                    except TimeoutError:
                        if kind:
                            writer.write(b"y" if kind == 1 else b" ")
                            await writer.drain()
                        continue
                    stats["answered" if data else "closed_by_server"] += 1
                    break
                else:
                    stats["open_at_end"] += 1
            except (ConnectionError, OSError):
                stats["closed_by_server"] += 1
            finally:
                writer.close()

    await asyncio.gather(*(one(i % 3) for i in range(connections)))
    return stats


def main() -> None:
    host, port, connections, seconds, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = connections + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    print(json.dumps(asyncio.run(flood(host, port, connections, seconds, path))), flush=True)


if __name__ == "__main__":
    main()
