"""Run a short client script to its end without the SDK's exit-time abort.

A process that used a Temporal client can abort while the interpreter shuts down (``Fatal Python
error: PyGILState_Release ... finalizing``, exit 134 / signal 6): the SDK's Rust runtime still has
threads that call into Python as finalisation begins (temporalio/sdk-python#300, open). The
commands of ``wfi`` end with ``os._exit`` for that reason; :func:`run_script` gives a user's own
script the same ending: its coroutine runs, output is flushed, and the process ends with the
script's own status before finalisation can begin.
"""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
from collections.abc import Coroutine
from typing import Any, NoReturn


def run_script(main: Coroutine[Any, Any, object]) -> NoReturn:
    """``asyncio.run(main)``, then end the process at once: status 0, 1 after an exception (its
    traceback printed, as Python would), 130 after Ctrl-C, or a ``SystemExit``'s own code.

    Only for a script run as a process (``python example.py``): it never returns. Files the script
    opened are flushed by their own ``with`` blocks; ``atexit`` handlers do not run.
    """
    try:
        asyncio.run(main)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if stop.code is not None and not isinstance(stop.code, int):
            print(stop.code, file=sys.stderr)
    except KeyboardInterrupt:
        code = 130
    except BaseException:  # noqa: BLE001 - printed as the interpreter would, then the status says it
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # stdout closed or full: what the script printed did not arrive
        code = code or 1
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)
