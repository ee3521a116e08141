"""Helpers shared by the report tests: which local files a page references."""
from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in {"src", "href"} and value is not None:
                self.refs.append(value)


def page_references(index: Path) -> list[str]:
    """Every src/href in the page (images, links)."""
    parser = _Refs()
    parser.feed(index.read_text(encoding="utf-8"))
    return parser.refs


def assert_self_contained(folder: Path) -> list[str]:
    """The page references only files that exist in its folder, and nothing remote."""
    refs = page_references(folder / "index.html")
    assert refs, "the page links nothing"
    for ref in refs:
        assert "://" not in ref and not ref.startswith("//"), f"external reference {ref!r}"
        assert not ref.startswith("/") and ".." not in ref, f"reference leaves the folder {ref!r}"
        assert (folder / ref).is_file(), f"index.html references missing file {ref!r}"
    return refs
