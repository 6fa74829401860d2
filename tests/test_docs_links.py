"""Every relative link in the README, docs/ and the model card points at a file that exists and, with `#anchor`
into a Markdown file, at one of its headings (GitHub's anchors), so moving text between pages cannot leave a
reader at a dead end. Links inside code (fenced blocks, `spans`) are not links; http(s) and mailto ones are not
checked (no network in tests)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "models" / "README.md"]

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
SPAN = re.compile(r"(?<!`)(`+)(?!`)(?:(?!\n\n).)+?(?<!`)\1(?!`)", re.S)  # inline code, may wrap a line
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")  # [text](target "title"), images too
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$")
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", re.I)


def prose(text: str) -> tuple[str, list[str]]:
    """The text outside fenced code blocks (inline code blanked out), and the headings in it, in order."""
    lines, headings, fence = [], [], None
    for line in text.splitlines():
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)[0] * len(opened.group(1))
            lines.append("")
            continue
        if fence is not None:
            if line.strip().startswith(fence) and set(line.strip()) == {fence[0]}:
                fence = None
            lines.append("")
            continue
        lines.append(line)
        if heading := HEADING.match(line):
            headings.append(heading.group(1))
    return SPAN.sub(" ", "\n".join(lines)), headings


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (code, emphasis and link markup dropped), lower case, every
    character but letters, digits, `_`, `-` and spaces removed, spaces turned into `-`."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every `#anchor` a page offers: its headings' slugs, the second of two equal ones with `-1`, and so on."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in prose(page.read_text())[1]:
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def dead_links(page: Path) -> list[str]:
    """The relative links of `page` that lead nowhere: a missing file, or an anchor no heading of the target has."""
    dead = []
    for target in LINK.findall(prose(page.read_text())[0]):
        if not target or EXTERNAL.match(target):
            continue
        path, _, anchor = unquote(target).partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            dead.append(target)
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            dead.append(target)
    return dead


def test_every_relative_link_leads_to_a_file_and_heading_that_exist():
    dead = {str(page.relative_to(ROOT)): links for page in PAGES if (links := dead_links(page))}
    assert not dead, f"dead links (file missing, or no such heading in it): {dead}"


def test_every_page_of_docs_is_linked_from_the_readme():
    readme = ROOT / "README.md"
    linked = {(readme.parent / t.partition("#")[0]).resolve() for t in LINK.findall(prose(readme.read_text())[0])}
    orphans = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not orphans, f"pages under docs/ the README's table does not link: {orphans}"


def test_a_planted_dead_link_or_anchor_is_caught_and_code_is_not_read_as_links(tmp_path):
    # A negative control for the check above: the same function must see each kind of dead end.
    (tmp_path / "b.md").write_text("# B\n\n## Other heading\n\n## Other heading\n")
    (tmp_path / "a.md").write_text(
        "# A\n\n## Real: `heading`, here\n\n"
        "[ok](b.md) [ok](b.md#other-heading) [ok](b.md#other-heading-1) [self](#real-heading-here) ![img](b.md)\n"
        "[gone](missing.md) [bad anchor](b.md#nope) [bad self](#nope-here)\n"
        "`[in code](not-a-link.md)` and ``[also `code`](nor-this.md)``, [web](https://example.com/x.md#y)\n\n"
        "```bash\n[fenced](nor-that.md)\n```\n"
    )
    assert dead_links(tmp_path / "a.md") == ["missing.md", "b.md#nope", "#nope-here"]


def test_slugs_follow_githubs_rules():
    assert slug("MTP modules: `python -m training.mtp`") == "mtp-modules-python--m-trainingmtp"
    assert slug("2026-12-06: the local sandbox's cost per command") == "2026-12-06-the-local-sandboxs-cost-per-command"
    assert slug("What you see, and the files a study writes") == "what-you-see-and-the-files-a-study-writes"
    assert slug("llama.cpp's own lookups, ported") == "llamacpps-own-lookups-ported"
