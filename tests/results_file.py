"""Reading a JSONL results file that a running agent may be appending to."""
from __future__ import annotations

import json
from pathlib import Path


def read_results(path: Path, *, skip_torn: bool = False) -> list[dict]:
    """The results of the file's finished lines.

    The last line is left out while it has no newline yet: the agent is still writing it, and a
    reader that polls the file can see it half written. ``skip_torn`` also leaves out lines that
    are not JSON: the torn line of a writer killed mid-write, which the sink ends with a newline
    when it starts again (used by the tests that kill the agent).
    """
    if not path.exists():
        return []
    text = path.read_text()
    finished = text.split("\n")[:-1]  # the piece after the last newline is unfinished or empty
    results = []
    for line in finished:
        if not line.strip():
            continue
        try:
            results.append(json.loads(line))
        except ValueError:
            if not skip_torn:
                raise
    return results
