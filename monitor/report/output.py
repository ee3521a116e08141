"""Writing report files: one figure at a time (a failure becomes a record, never an
exception), and text files replaced atomically so a reader never sees half a page."""
from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from monitor.report import html as H
from monitor.report import style
from monitor.report.errors import ReportInputError, ReportWriteError
from monitor.report.figures import Drawn

log = logging.getLogger(__name__)


def render_figure(folder: Path, key: str, title: str, caption: str,
                  build: Callable[[], Drawn], file: str | None = None) -> H.FigureRecord:
    """Build and save one figure; any failure becomes a record, never an exception."""
    record = H.FigureRecord(key=key, title=title, caption=caption)
    name = file or f"{key}.png"
    try:
        drawn = build()
    except ReportInputError as exc:
        log.info("report figure %s not drawn: %s", key, exc)
        record.status, record.reason = "skipped", str(exc)
        return record
    except Exception as exc:
        log.exception("report figure %s failed to draw", key)
        record.status, record.reason = "failed", f"{type(exc).__name__}: {exc}"
        return record
    try:
        drawn.figure.savefig(folder / name, dpi=style.DPI)
    except Exception as exc:
        log.exception("report figure %s failed to save to %s", key, folder / name)
        record.status, record.reason = "failed", f"saving {name}: {type(exc).__name__}: {exc}"
        return record
    finally:
        # Break the figure's reference cycles now: a long-running agent should not wait for
        # the cyclic garbage collector to free the pixel buffers of every report.
        drawn.figure.clear()
    record.file, record.meta = name, drawn.meta
    return record


def write_text(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a page."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_pages(folder: Path, manifest: dict[str, Any], page: str, *, what: str,
                fix: str) -> None:
    """Write a report's ``report.json`` and ``index.html``; a failure to write becomes a
    :class:`ReportWriteError` that names ``what`` could not be written and the ``fix``."""
    try:
        write_text(folder / "report.json", json.dumps(manifest, indent=2, default=str) + "\n")
        write_text(folder / "index.html", page)
    except OSError as exc:
        raise ReportWriteError(
            f"cannot write the {what} in {str(folder)!r} ({exc}); {fix}") from exc
