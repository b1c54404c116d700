"""Headless Chromium driven over the DevTools protocol: open a page, wait until it shows a text, take
a screenshot. For checking what the Temporal Web UI really renders (tests/integration/test_operator_view.py)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import pathlib
import shutil
import subprocess
import tempfile
import urllib.request
from typing import Any

from tests.support.worker_proc import free_port

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# The page's text with that of its same-origin frames (the Temporal UI renders markdown in an iframe).
TEXT_JS = """(() => {
  const docs = [document, ...[...document.querySelectorAll('iframe')].map(f => { try { return f.contentDocument; } catch (e) { return null; } })];
  return docs.filter(d => d && d.body).map(d => d.body.innerText).join('\\n');
})()"""


def find_chromium() -> str | None:
    """The Chromium (or Chrome) binary on PATH, if any (Debian: ``apt-get install -y chromium``)."""
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


class Browser:
    """One headless Chromium process and one page of it."""

    def __init__(self, chromium: str, *, width: int = 1400, height: int = 2400) -> None:
        self.chromium, self.width, self.height = chromium, width, height
        self._ids = itertools.count(1)
        self._proc: subprocess.Popen[bytes] | None = None
        self._profile = tempfile.TemporaryDirectory(ignore_cleanup_errors=True)  # helpers of chromium may still write as it exits
        self._ws: Any = None

    async def __aenter__(self) -> Browser:
        import websockets

        port = free_port()
        self._proc = subprocess.Popen(
            [self.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             f"--remote-debugging-port={port}", f"--user-data-dir={self._profile.name}",
             f"--window-size={self.width},{self.height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = await _page_socket(port)
        self._ws = await websockets.connect(url, max_size=64 * 1024 * 1024)
        await self.call("Page.enable")
        await self.call("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                        deviceScaleFactor=1, mobile=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._profile.cleanup()

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        await self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(await self._ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    async def open(self, url: str, *, wait_for: str, timeout: float = 60) -> str:
        """Navigate and wait until the page's text contains ``wait_for``; return that text."""
        await self.call("Page.navigate", url=url)
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            text = await self.evaluate(TEXT_JS) or ""
            if wait_for in text:
                return text
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"{url} did not show {wait_for!r} within {timeout:g}s; it ends with: {text[-600:]!r}")
            await asyncio.sleep(0.5)

    async def frame_tags(self, containing: str) -> list[str]:
        """Tag names of the elements of the same-origin frame whose text contains ``containing``."""
        return await self.evaluate(f"""(() => {{
          for (const f of document.querySelectorAll('iframe')) {{
            const d = f.contentDocument;
            if (d && d.body && d.body.innerText.includes({json.dumps(containing)}))
              return [...d.body.querySelectorAll('*')].map(e => e.tagName);
          }}
          return [];
        }})()""") or []

    async def screenshot(self, target: pathlib.Path) -> None:
        shot = await self.call("Page.captureScreenshot", format="png")
        target.write_bytes(base64.b64decode(shot["data"]))


async def _page_socket(port: int, timeout: float = 30) -> str:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as answer:
                pages = [p for p in json.load(answer) if p.get("type") == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
        except OSError:
            pass
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("Chromium did not open its DevTools port")
        await asyncio.sleep(0.2)
