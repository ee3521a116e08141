"""``api: v2`` (influxdb-client, Flux) against a REAL InfluxDB 2.x, never a fake.

No 2.x server can be installed on the CI machines (only influxd 1.6.7 is packaged, and it
has no /api/v2), so these tests run only when one is named by environment:
MMDWATCH_INFLUX2_URL, MMDWATCH_INFLUX2_TOKEN, MMDWATCH_INFLUX2_ORG, MMDWATCH_INFLUX2_BUCKET
(a scratch bucket: the test writes to it).
"""
from __future__ import annotations

import os
import uuid

import pandas as pd
import pytest

ENV = {k: os.environ.get(f"MMDWATCH_INFLUX2_{k.upper()}") for k in ("url", "token", "org",
                                                                     "bucket")}
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not all(ENV.values()),
                       reason="no InfluxDB 2.x server configured (set MMDWATCH_INFLUX2_URL, "
                              "_TOKEN, _ORG, _BUCKET); none is installable here"),
]


def test_v2_write_then_flux_window_and_watermark():
    pytest.importorskip("influxdb_client", reason="pip install 'mmdwatch[influx2]'")
    from connectors.influxdb import InfluxSink, InfluxSource

    measurement = f"mmdwatch_test_{uuid.uuid4().hex[:8]}"
    base = {"type": "influxdb", "api": "v2", **ENV}
    t0 = pd.Timestamp("2024-06-01T00:00:00Z")
    sink = InfluxSink({**base, "inspection_measurement": measurement + "_insp",
                       "score_measurement": measurement})
    for hour in range(3):
        sink.send({"site": "t", "status": "ok", "fingerprint": str(hour),
                   "inspection_time": (t0 + pd.Timedelta(hours=hour)).isoformat(),
                   "sensors": [{"sensor_id": "a", "rank": 1, "score": float(hour),
                                "selected": False}]})
    sink.close()
    source = InfluxSource({**base, "measurement": measurement, "sensor_tag": "sensor_id",
                           "field": "score"})
    frame = source.read_window(t0, t0 + pd.Timedelta(hours=3))
    assert sorted(frame["value"]) == [0.0, 1.0, 2.0]
    assert source.watermark() == t0 + pd.Timedelta(hours=2)
    source.close()
