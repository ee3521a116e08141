"""Property-based tests of the config loader: any YAML text and any mapping either gives
a validated config or a ConfigError listing problems that each name a key and a fix.
Never another exception, and never a secret echoed back."""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from monitor.config import ConfigError, MonitorConfig, load_config, validate_config
from tests.fuzz.budget import count, fuzz_settings

TMP = Path(tempfile.mkdtemp(prefix="mmdwatch-fuzz-config-"))
SECRET = "hunter2-Sup3rSecret"
ENV = {"MQTT_PASSWORD": SECRET, "EMPTY": ""}

VALID: dict[str, Any] = {
    "site": "l-town",
    "state_dir": str(TMP / "state"),
    "source": {"type": "mqtt", "host": "127.0.0.1", "port": 1883,
               "topics": ["sensors/#"], "username": "u", "password": "${MQTT_PASSWORD}"},
    "windows": {"before": "7d", "after": "7d", "resample": "1h"},
    "schedule": {"cron": "0 0 * * *", "timezone": "UTC"},
    "engine": {"method": "cv-aggregation", "alpha": 0.05, "seed": 0, "block_size": "1d"},
    "health": {"port": None},
    "sinks": [{"type": "console"}, {"type": "jsonl", "path": str(TMP / "r.jsonl")}],
}
# ${MQTT_PASSWORD} goes only where secrets belong: a secret pasted into, say, source.type
# may be echoed when that key is reported wrong (see docs/reliability.md, Security).
SECRET_PATHS = [("source", "password"), ("source", "username")]
PATHS = [("site",), ("state_dir",), ("source",), ("source", "type"), ("source", "port"),
         ("source", "topics"), ("source", "password"), ("windows", "before"),
         ("windows", "resample"), ("schedule", "cron"), ("schedule", "timezone"),
         ("engine", "method"), ("engine", "alpha"), ("engine", "block_size"),
         ("health", "port"), ("sinks",), ("health",), ("engine",)]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(),
    st.text(max_size=10),
    st.sampled_from(["7d", "1h", "0s", "-1d", "1.5h", "13 months", "0 0 * * *", "* * *",
                     "Mars/Olympus", "${UNSET_VAR}", "x${UNSET}y",
                     "${EMPTY:-fallback}", "cv-aggregation", "cuda:0", "mqtt", "file"]),
)
values = st.recursive(scalars, lambda c: st.lists(c, max_size=3)
                      | st.dictionaries(st.text(max_size=8), c, max_size=3), max_leaves=6)


def check(load) -> MonitorConfig | None:  # type: ignore[no-untyped-def]
    try:
        return load()
    except ConfigError as exc:
        assert exc.problems, "a ConfigError must list at least one problem"
        for p in exc.problems:
            assert isinstance(p, str) and ":" in p and len(p) > 10, p
            assert SECRET not in p, "a problem message echoed a secret"
        assert SECRET not in str(exc)
        return None


def _set(doc: dict, path: tuple[str, ...], value: Any) -> dict:
    import copy

    out = copy.deepcopy(doc)
    node = out
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[path[-1]] = value
    return out


@fuzz_settings(700)
@given(st.lists(st.one_of(st.tuples(st.sampled_from(PATHS), values),
                          st.tuples(st.sampled_from(SECRET_PATHS),
                                    st.sampled_from(["${MQTT_PASSWORD}", 12, None, ["x"]]))),
                min_size=1, max_size=3))
def test_mutated_valid_config_validates_or_names_the_key(mutations: list) -> None:
    doc = VALID
    for path, value in mutations:
        doc = _set(doc, path, value)
    config = check(lambda: validate_config(doc, env=ENV))
    if config is not None:
        assert isinstance(config, MonitorConfig)
    count("config loader")


@fuzz_settings(700)
@given(st.dictionaries(st.sampled_from(list(VALID) + ["bogus", "Site", "sink"]), values,
                       max_size=6))
def test_arbitrary_mappings(doc: dict) -> None:
    check(lambda: validate_config(doc, env=ENV))
    count("config loader")


@fuzz_settings(500)
@given(st.one_of(
    st.text(max_size=120),
    st.builds(lambda d: yaml.safe_dump(d), st.dictionaries(st.sampled_from(list(VALID)), values,
                                                          max_size=5)),
    st.sampled_from(["site: [", "a: b: c", "\t- x", "!!python/object/apply:os.system ['true']",
                     "--- &a [*a]", "source: {type: mqtt, password: ${MQTT_PASSWORD}"]),
))
def test_arbitrary_yaml_text(text: str) -> None:
    path = TMP / "config.yaml"
    path.write_text(text, encoding="utf-8")
    check(lambda: load_config(path, env=ENV))
    count("config loader")


def test_the_valid_config_is_valid_and_unset_whole_secret_is_null() -> None:
    config = validate_config(VALID, env=ENV)
    assert config.site == "l-town"
    config = validate_config(VALID, env={})
    assert config.source.password is None  # an optional secret may be left unset


def test_python_tags_are_not_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "c.yaml"
    path.write_text(f"site: !!python/object/apply:os.system ['touch {marker}']\n")
    try:
        load_config(path, env=ENV)
    except ConfigError as exc:
        assert "YAML" in str(exc)
    assert not marker.exists()
