"""Checks that keep secrets private: config file permissions and literal secrets.

A password written into a config file that other users can read is a leaked password.
:func:`exposed_secret_warning` looks at the parsed YAML *before* ``${ENV}`` expansion (a
``${MQTT_PASSWORD}`` reference is not a secret; ``password: s3cret`` is) and at the file's
mode bits, and returns a warning naming the keys and the fix, or None.
"""
from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Any

#: key names whose values are credentials (compared lower-case, ``-`` and ``_`` ignored)
SECRET_KEYS = frozenset({"password", "passwd", "token", "secret", "apikey", "apitoken",
                         "authorization", "clientsecret", "privatekey"})
_ENV_ONLY = re.compile(r"^\s*\$\{[A-Za-z_][A-Za-z0-9_]*(:-[^}]*)?\}\s*$")


def _is_secret_key(key: object) -> bool:
    return isinstance(key, str) and key.lower().replace("-", "").replace("_", "") in SECRET_KEYS


def literal_secrets(node: Any, path: str = "", _seen: frozenset[int] = frozenset()) -> list[str]:
    """Key paths of secrets written literally (not as a whole ``${VAR}`` reference).

    YAML anchors can make a node contain itself (``&a [*a]``): such a node is visited once.
    """
    found: list[str] = []
    if isinstance(node, dict | list):
        if id(node) in _seen:
            return found
        _seen = _seen | {id(node)}
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            if _is_secret_key(key) and value not in (None, "") and not (
                    isinstance(value, str) and _ENV_ONLY.match(value)):
                found.append(where)
            elif key == "headers" and isinstance(value, dict) and any(
                    isinstance(v, str) and v and not _ENV_ONLY.match(v) for v in value.values()):
                found.append(where)  # webhook headers usually carry Authorization
            else:
                found.extend(literal_secrets(value, where, _seen))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(literal_secrets(value, f"{path}[{i}]", _seen))
    return found


def readable_by_others(path: Path) -> bool:
    """True when users other than the owner may read the file (group or world bits)."""
    mode = Path(path).stat().st_mode
    return bool(mode & (stat.S_IRGRP | stat.S_IROTH))


def exposed_secret_warning(path: Path, raw: Any) -> str | None:
    """A warning when ``path`` is readable by others and ``raw`` holds a literal secret."""
    try:
        exposed = readable_by_others(path)
    except OSError:
        return None
    keys = literal_secrets(raw)
    if not (exposed and keys):
        return None
    return (f"{path} is readable by other users and holds a secret in {', '.join(keys)}; "
            f"run `chmod 600 {path}` or write the secret as ${{ENV_VAR}} and export it")
