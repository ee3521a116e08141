"""The InfluxDB source's shape (no server): ``api`` picks one of two reader classes, and the
package's modules import each other one way only."""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from connectors.base import ConnectorError, WindowSource
from connectors.influxdb import InfluxSource, InfluxSourceConfig
from connectors.influxdb.v1 import InfluxQLSource
from connectors.registry import source_class

PACKAGE = Path(__file__).resolve().parents[2] / "connectors" / "influxdb"
BASE = {"type": "influxdb", "url": "http://127.0.0.1:1", "measurement": "m"}


def test_api_v1_builds_the_influxql_reader():
    source = source_class("influxdb")({**BASE, "database": "d"})
    assert type(source) is InfluxQLSource and isinstance(source, WindowSource)
    assert source_class("influxdb").Config is InfluxSourceConfig  # the config contract
    assert repr(source) == ("InfluxQLSource(url='http://127.0.0.1:1', database='d', "
                            "measurement='m')")
    source.close()


def test_api_v2_builds_the_flux_reader_or_names_the_missing_package():
    config = {**BASE, "api": "v2", "org": "o", "bucket": "b", "token": "t"}
    if importlib.util.find_spec("influxdb_client") is None:
        with pytest.raises(ConnectorError, match="pip install 'mmdwatch\\[influx2\\]'"):
            InfluxSource(config)
        return
    from connectors.influxdb.v2 import FluxSource

    source = InfluxSource(config)
    assert type(source) is FluxSource and isinstance(source, WindowSource)
    source.close()


def _imports(path: Path) -> set[str]:
    """connectors.influxdb modules imported anywhere in ``path`` (lazy imports too)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m.rsplit(".", 1)[-1] for m in out if m.startswith("connectors.influxdb.")}


def test_the_readers_share_a_config_module_and_never_import_each_other():
    graph = {p.stem: _imports(p) for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    assert "v2" not in graph["v1"] and "v1" not in graph["v2"]
    assert {"config"} <= graph["v1"] & graph["v2"]
    seen: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join((*path, module))}"
        if module in seen:
            return
        for target in graph.get(module, ()):
            visit(target, (*path, module))
        seen.add(module)

    for module in graph:
        visit(module, ())


def test_the_flux_bins_start_at_the_window_as_the_influxql_ones():
    # 5-s inspections in 2-s bins: a window that starts on an odd second needs bins on
    # odd seconds (the Flux text alone: no 2.x server here)
    from types import SimpleNamespace

    import pandas as pd

    from connectors.influxdb.v1 import window_query
    from connectors.influxdb.v2 import FluxSource

    config = InfluxSourceConfig(**{**BASE, "api": "v2", "org": "o", "bucket": "b",
                                   "token": "t"})
    start, end = pd.Timestamp("2020-03-09T16:11:35Z"), pd.Timestamp("2020-03-09T16:17:05Z")
    flux = FluxSource._flux(SimpleNamespace(config=config), start, end, "2s", "mean")
    assert "aggregateWindow(every: 2s, offset: 1s, fn: mean," in flux
    influxql = window_query(InfluxSourceConfig(**{**BASE, "database": "d"}), '"d".."m"',
                            start, end, "2s", "mean")
    assert "GROUP BY time(2s, 1s)" in influxql
    assert 'stddev("value") AS "sd", count("value") AS "n"' in influxql
