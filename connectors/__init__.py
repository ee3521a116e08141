"""I/O adapters: sources that produce readings and sinks that deliver inspection results.

No statistics here. Each source or sink is one small class behind the interfaces in
:mod:`connectors.base`, chosen by the ``type`` key of the config through
:mod:`connectors.registry`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from connectors.base import (
        ConnectorError,
        Reading,
        Sink,
        SinkError,
        StreamSource,
        WindowSource,
    )


def __getattr__(name: str) -> Any:
    """The interfaces load on first use (PEP 562): ``connectors.timeutil`` is imported by
    light modules (config, result) that must not pull pandas in with ``connectors.base``."""
    if name in __all__:
        import connectors.base

        return getattr(connectors.base, name)
    raise AttributeError(f"module 'connectors' has no attribute {name!r}")


__all__ = ["ConnectorError", "Reading", "Sink", "SinkError", "StreamSource", "WindowSource"]
