"""Self-contained HTML pages: inline CSS, relative links to files in the same folder only, so
a report opens from disk (or a copied folder, or an e-mail attachment unpacked) with no server
and no external assets. Every value from the result is escaped.
"""
from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from monitor.report import style

CSS = f"""
body {{ font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1.5rem auto;
       max-width: 1400px; padding: 0 1rem; color: #1d1d1d; line-height: 1.45; }}
h1 {{ font-size: 1.45rem; margin-bottom: .2rem; }} h2 {{ font-size: 1.15rem; margin-top: 2rem;
     border-bottom: 1px solid #ddd; padding-bottom: .2rem; }}
.badge {{ display: inline-block; padding: .1rem .55rem; border-radius: .8rem; color: #fff;
         font-size: .85rem; font-weight: 600; vertical-align: middle; }}
.firing {{ background: {style.SELECTED_COLOUR}; }} .ok {{ background: #2e7d32; }}
.error, .unknown {{ background: #616161; }}
.summary {{ font-size: 1.08rem; margin: .6rem 0 1rem; }}
.errorbox {{ border-left: 4px solid #b00020; background: #fdecee; padding: .6rem .9rem; }}
.note {{ border-left: 4px solid #e0a800; background: #fff8e1; padding: .4rem .8rem; margin: .4rem 0; }}
table {{ border-collapse: collapse; font-size: .9rem; }}
th, td {{ padding: .2rem .6rem; border-bottom: 1px solid #eee; text-align: left; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
tr.sel td {{ color: {style.SELECTED_COLOUR}; font-weight: 600; }}
figure {{ margin: 1rem 0; }} figure img {{ max-width: 100%; border: 1px solid #eee; }}
figcaption {{ font-size: .9rem; color: #444; max-width: 70rem; }}
.before {{ color: {style.BEFORE_COLOUR}; font-weight: 600; }}
.after {{ color: {style.AFTER_COLOUR}; font-weight: 600; }}
.muted {{ color: #666; font-size: .85rem; }}
"""


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


@dataclass
class FigureRecord:
    """One figure of a report: drawn (``file`` set) or not (``reason`` says why)."""

    key: str
    title: str
    caption: str
    file: str | None = None
    status: str = "drawn"  # drawn | skipped | failed
    reason: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "title": self.title, "file": self.file, "status": self.status,
                "reason": self.reason, "meta": self.meta}


def page(title: str, body: Iterable[str]) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{esc(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


def badge(status: str) -> str:
    cls = status if status in {"firing", "ok", "error"} else "unknown"
    return f'<span class="badge {cls}">{esc(status)}</span>'


def key_values(rows: Sequence[tuple[str, str]]) -> str:
    """Two-column table; values are already-escaped HTML."""
    cells = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<table>{cells}</table>"


def table(header: Sequence[str], rows: Iterable[Sequence[str]],
          numeric: AbstractSet[int] = frozenset(),
          row_classes: Iterable[str] | None = None) -> str:
    """Table; cell values are already-escaped HTML; ``numeric`` column indices right-align."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    classes = list(row_classes) if row_classes is not None else None
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{classes[i]}"' if classes and classes[i] else ""
        cells = "".join(f'<td class="num">{c}</td>' if j in numeric else f"<td>{c}</td>"
                        for j, c in enumerate(row))
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def figure_section(record: FigureRecord) -> str:
    parts = [f"<h2>{esc(record.title)}</h2>"]
    if record.file:
        parts.append(f'<figure><a href="{esc(record.file)}" title="open full size">'
                     f'<img src="{esc(record.file)}" alt="{esc(record.title)}"></a>'
                     f"<figcaption>{record.caption}</figcaption></figure>")
    else:
        word = "not drawn" if record.status == "skipped" else "failed to draw"
        parts.append(f'<p class="note">This figure was {word}: {esc(record.reason)}</p>')
    return "\n".join(parts)
