"""The installed distribution's version (``wf_initiation.__version__``): read on first use, since
importing ``importlib.metadata`` is slow."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("wf-initiation")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
