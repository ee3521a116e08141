"""The README and docs/ stay connected: short front page, no dead links, no orphan pages.

* README.md is at most 300 lines (the depth lives in docs/, one subject per page);
* every relative Markdown link in README.md and docs/ (inline, image or reference style,
  outside code) points at a file or folder that exists in the repository, and a ``#anchor``
  into a Markdown file (or the page itself) names one of its headings, slugged the way
  GitHub does;
* every docs/*.md page is linked from README.md or docs/README.md, and docs/README.md from
  README.md;
* every path of the repository's own code (``engine/...``, ``monitor/...``, ...) that the
  pages name exists, so a move of a module cannot leave the docs pointing at the old place.

Standard library only; the checks are run on small samples first so that a checker that
finds nothing cannot pass silently.
"""
from __future__ import annotations

import glob
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 300

# ---------------------------------------------------------------------------------------
# Reading Markdown: code removed, links and headings found
# ---------------------------------------------------------------------------------------

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
# [text](target) and ![alt](target); text may hold one level of brackets ([`a[0]`](x)).
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.MULTILINE)
_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_HTML_ID = re.compile(r"<a\s[^>]*(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        out.append((number, line))
    return out


def _without_code_spans(line: str) -> str:
    return _CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)


@dataclass(frozen=True)
class Link:
    source: Path
    line: int
    target: str

    def __str__(self) -> str:
        return f"{self.source.relative_to(ROOT)}:{self.line}: ({self.target})"


def links(path: Path, text: str | None = None) -> list[Link]:
    """Every link target written in a Markdown file, outside code."""
    text = path.read_text(encoding="utf-8") if text is None else text
    found: list[Link] = []
    for number, line in prose_lines(text):
        bare = _without_code_spans(line)
        for m in _INLINE_LINK.finditer(bare):
            found.append(Link(path, number, m.group(1).strip("<>")))
        for m in _REFERENCE_DEF.finditer(bare):
            found.append(Link(path, number, m.group(1).strip("<>")))
    return found


def _heading_text(raw: str) -> str:
    """The text GitHub renders for a heading's Markdown (what its slug is made of)."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", raw)  # links -> text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = _CODE_SPAN.sub(lambda m: m.group(2).strip(), text)  # code spans keep their text
    text = re.sub(r"(?<![\w\\])_([^_]+)_(?!\w)", r"\1", text)  # _emphasis_ (not snake_case)
    return text


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading (github-slugger): lower case; letters, digits, marks,
    ``_``, ``-`` and spaces kept, every other character dropped; each space a hyphen."""
    kept = []
    for ch in _heading_text(heading).strip().lower():
        category = unicodedata.category(ch)
        if ch in " -" or category[0] in "LNM" or category == "Pc":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def anchors(path: Path, text: str | None = None) -> set[str]:
    """The anchors a Markdown page offers: its heading slugs (repeats get ``-1``, ``-2``,
    as on GitHub) and explicit ``<a name|id="...">`` targets."""
    text = path.read_text(encoding="utf-8") if text is None else text
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in prose_lines(text):
        m = _ATX_HEADING.match(line)
        if m:
            slug = github_slug(m.group(2) or "")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
        found.update(_HTML_ID.findall(line))
    return found


def problems(link: Link, root: Path = ROOT) -> str | None:
    """Why ``link`` is broken, or None when it resolves."""
    target = link.target
    if not target or _EXTERNAL.match(target) or target.startswith("//"):
        return None  # external: not checked here (no network in the test suite)
    path_part, _, fragment = target.partition("#")
    path_part = unquote(path_part.split("?", 1)[0])
    if path_part.startswith("/"):
        return "absolute path: write it relative to the page"
    resolved = (link.source.parent / path_part).resolve() if path_part else link.source
    try:
        resolved.relative_to(root.resolve())
    except ValueError:
        return f"{path_part} leaves the repository"
    if not resolved.exists():
        return f"{path_part} does not exist"
    if (fragment and resolved.suffix == ".md" and resolved.is_file()
            and unquote(fragment) not in anchors(resolved)):
        return f"no heading #{fragment} in {resolved.relative_to(root.resolve())}"
    return None


def doc_pages() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [README, *sorted(DOCS.rglob("*.md"))]


# ---------------------------------------------------------------------------------------
# The checker itself, on samples whose answer is known
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("heading", "slug"), [
    ("Publishing (`--publish`)", "publishing---publish"),
    (("Executors (`monitor/fleet/executors.py`, `monitor/fleet/jobs.py`, "
      "`monitor/fleet/backfill.py`)"),
     "executors-monitorfleetexecutorspy-monitorfleetjobspy-monitorfleetbackfillpy"),
    ("`--cluster`: a backfill on many workers", "--cluster-a-backfill-on-many-workers"),
    ("Model: a year of 100 sites hourly (876,000 inspections)",
     "model-a-year-of-100-sites-hourly-876000-inspections"),
    ("`mmdwatch_incident` (one point per incident event)",
     "mmdwatch_incident-one-point-per-incident-event"),
    ("Profiles: alerts within hours, or \"what changed around t\"",
     "profiles-alerts-within-hours-or-what-changed-around-t"),
    ("The data's path", "the-datas-path"),
    ("A [linked](x.md) *word* and _emphasis_", "a-linked-word-and-emphasis"),
    ("Rüschendorf's bound", "rüschendorfs-bound"),
])
def test_github_slug(heading: str, slug: str) -> None:
    assert github_slug(heading) == slug


def test_checker_finds_links_and_headings_outside_code(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Part (`x`)\n\n## Part (`x`)\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[ok](other.md#part-x) [repeat](other.md#part-x-1) [self](#page) ![img](other.md)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) [web](https://example.org/x.md)\n"
        "`[in code](missing-too.md)`\n\n"
        "```\n[fenced](missing-three.md)\n```\n\n"
        "[ref]: other.md#nope-either\n"
    )
    found = links(page)
    assert [link.target for link in found] == [
        "other.md#part-x", "other.md#part-x-1", "#page", "other.md", "missing.md",
        "other.md#nope", "https://example.org/x.md", "other.md#nope-either"]
    broken = {link.target: problems(link, root=tmp_path) for link in found}
    assert {t for t, why in broken.items() if why} == {
        "missing.md", "other.md#nope", "other.md#nope-either"}
    assert "does not exist" in str(broken["missing.md"])
    assert "no heading #nope" in str(broken["other.md#nope"])


def test_checker_rejects_links_out_of_the_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (tmp_path / "outside.md").write_text("# Outside\n")
    page = repo / "page.md"
    page.write_text("[out](../outside.md)\n")
    (link,) = links(page)
    assert "leaves the repository" in str(problems(link, root=repo))


# ---------------------------------------------------------------------------------------
# The repository's pages
# ---------------------------------------------------------------------------------------

def test_readme_is_short() -> None:
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, (
        f"README.md has {n} lines (at most {MAX_README_LINES}): move the depth to a docs/ page "
        "and link it")


def test_every_relative_link_resolves() -> None:
    all_links = [link for page in doc_pages() for link in links(page)]
    relative = [link for link in all_links if not _EXTERNAL.match(link.target)]
    # the pages link to each other a lot; far fewer found means the link parser broke
    assert len(relative) > 100, f"only {len(relative)} relative links found"
    assert any("#" in link.target for link in relative)
    broken = [f"{link}: {why}" for link in relative if (why := problems(link))]
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_docs_page_is_linked_from_an_index() -> None:
    linked: set[Path] = set()
    for index in (README, DOCS / "README.md"):
        for link in links(index):
            if _EXTERNAL.match(link.target):
                continue
            path_part = unquote(link.target.partition("#")[0])
            if path_part:
                linked.add((index.parent / path_part).resolve())
    pages = sorted(DOCS.glob("*.md"))
    assert len(pages) >= 10
    orphans = [p.relative_to(ROOT).as_posix() for p in pages
               if p.resolve() not in linked]
    assert not orphans, (
        f"pages linked from neither README.md nor docs/README.md: {orphans}; add each to the "
        "table in docs/README.md")


_CODE_PATH = re.compile(r"(?<![\w./-])((?:engine|monitor|connectors|bench|tests)/[\w./*-]*[\w*/])")


def test_named_code_paths_exist() -> None:
    """``monitor/detection.py`` and the like: a page naming a file that moved is wrong."""
    missing: list[str] = []
    named = 0
    for page in doc_pages():
        text = page.read_text(encoding="utf-8")
        for number, line in prose_lines(text):
            for m in _CODE_PATH.finditer(line):
                named += 1
                path = m.group(1).rstrip(".")
                if not glob.glob(str(ROOT / path)):
                    missing.append(f"{page.relative_to(ROOT)}:{number}: {path}")
    assert named > 100, f"only {named} code paths found"
    assert not missing, "paths that do not exist:\n" + "\n".join(missing)
