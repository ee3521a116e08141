"""I/O adapters: sources that produce readings and sinks that deliver inspection results.

No statistics here. Each source or sink is one small class behind the interfaces in
:mod:`connectors.base`, chosen by the ``type`` key of the config through
:mod:`connectors.registry`.
"""
from connectors.base import (
    ConnectorError,
    Reading,
    Sink,
    SinkError,
    StreamSource,
    WindowSource,
)

__all__ = ["ConnectorError", "Reading", "Sink", "SinkError", "StreamSource", "WindowSource"]
