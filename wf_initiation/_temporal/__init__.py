"""Reaching Temporal, in three modules: :mod:`.connection` (connection flags, environment and
profiles, TLS, the codec setting, the client, one-line connection errors), :mod:`.worker` (the
worker runner and its bounded shutdown, signals, the worker's log lines) and :mod:`.dev_server`
(the embedded dev server of ``wfi up``).

Every name the rest of the project uses is re-exported here, so ``from wf_initiation._temporal
import X`` and ``_temporal.X`` read the same objects as the submodule that defines them. A test
that replaces one of them must patch the submodule where it is used (e.g.
``wf_initiation._temporal.dev_server.port_in_use``): patching it here would not reach its callers.
"""

from __future__ import annotations

from wf_initiation._temporal.connection import (
    DEFAULT_ADDRESS,
    ConnectFlags,
    check_address,
    check_namespace,
    client_options,
    codec_setting,
    connect,
    connect_options,
    flag_environment,
    namespace_missing_message,
    one_line,
    unreachable_message,
)
from wf_initiation._temporal.dev_server import (
    READY_TIMEOUT,
    DevServer,
    dial_host,
    find_temporal_binary,
    port_in_use,
    start_dev_server,
)
from wf_initiation._temporal.dev_server import _stdio_to as _stdio_to  # bench/_common.py sends a server's output to a file
from wf_initiation._temporal.worker import (
    GRACEFUL_SHUTDOWN,
    SHUTDOWN_MARGIN,
    configure_logging,
    run_worker,
    shutdown_within,
    stop_on_signals,
)
from wf_initiation.errors import TemporalUnavailable

__all__ = [
    "DEFAULT_ADDRESS", "GRACEFUL_SHUTDOWN", "READY_TIMEOUT", "SHUTDOWN_MARGIN", "ConnectFlags", "DevServer",
    "TemporalUnavailable", "check_address", "check_namespace", "client_options", "codec_setting", "configure_logging",
    "connect", "connect_options", "dial_host", "find_temporal_binary", "flag_environment", "namespace_missing_message",
    "one_line", "port_in_use", "run_worker", "shutdown_within", "start_dev_server", "stop_on_signals",
    "unreachable_message",
]
