"""The docs site as a reader sees it (issue 41): built with `mkdocs build --strict`, served on loopback
and opened in headless Chromium, every page at a laptop's width (1280 px) and a narrow window (800 px).

What counts as a fault, and why:

* the page is wider than the window (a sideways scroll of the whole page);
* a code block is cut: its content is wider than its box. One that scrolls sideways counts too: Material
  draws its scrollbar as a thin pale bar below the last line (headless Chromium draws none at all), so
  the reader of an output block sees lines end mid-word at the box's edge. Every line must be readable
  where it is;
* a word in a table cell's code span split over two lines (`prefill_cud` / `a_graph`), found from the
  top of each character's rendered box. A break after '_', '-', ',' or a space leaves whole words; one
  after a flag's leading dashes ('--' / 'quick') does not;
* a page of the built site (each index.html but 404) that the nav's links, followed from the home page,
  never reach;
* a home page that sends the reader to "the repository's README", which the site does not hold, instead
  of its own Getting started page.

Each check also runs on a small planted site that has every fault: a check that finds nothing there
proves nothing about the real one.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..support import docs_site
from ..support.docs_site import PageView
from ..support.project import ROOT

if TYPE_CHECKING:
    from playwright.sync_api import Browser

VIEWPORTS = (1280, 800)
MISSING = docs_site.missing_browser()
if MISSING is not None:
    pytest.skip(MISSING, allow_module_level=True)  # one line for the module, not one per test


class Site:
    """A served site and every page's view at every viewport width."""

    def __init__(self, folder: Path, base: str, views: list[PageView]) -> None:
        self.pages = docs_site.site_pages(folder)
        self.base = base
        self.views = views

    def at(self, width: int) -> dict[str, PageView]:
        return {v.page: v for v in self.views if v.viewport == width}


def _views(browser: Browser, base: str, pages: list[str]) -> list[PageView]:
    return docs_site.views(browser, base, pages, VIEWPORTS)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with docs_site.chromium() as found:
        yield found


@pytest.fixture(scope="module")
def site(browser: Browser, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    folder = tmp_path_factory.mktemp("docs-site") / "site"
    mkdocs = Path(sys.executable).parent / "mkdocs"
    proc = subprocess.run(
        [str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(mkdocs.parent), "HOME": str(folder.parent)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with docs_site.served(folder) as base:
        yield Site(folder, base, _views(browser, base, docs_site.site_pages(folder)))


# --- the checks, each a list of faults in words a reader of the failure can act on ------------------------


def wider_than_window(site: Site) -> list[str]:
    return [f"{v.where}: the page is {v.page_width} px wide" for v in site.views if v.page_width > v.viewport]


def cut_blocks(site: Site) -> list[str]:
    return [
        f"{v.where}: {c.content_width} px of content in a {c.box_width} px box: {c.starts!r}"
        for v in site.views
        for c in v.cut
    ]


def broken_words(site: Site) -> list[str]:
    return [f"{v.where}: {b.text!r} drawn as {' / '.join(b.lines)}" for v in site.views for b in v.broken]


def unreached(site: Site) -> list[str]:
    problems = []
    for width in VIEWPORTS:
        views = site.at(width)
        got = docs_site.reached(views[""], views, site.base)
        problems += [f"/{page} at {width} px: no nav link leads to it" for page in site.pages if page not in got]
    return problems


def home_page_faults(site: Site) -> list[str]:
    home = site.at(VIEWPORTS[0])[""]
    problems = []
    if "repository's README" in home.content_text:
        problems.append("the home page sends the reader to the repository's README, which the site does not hold")
    linked = {docs_site.site_path(site.base, link) for link in home.content_links}
    if "getting-started/" not in linked:
        problems.append("the home page's text has no link to getting-started/")
    return problems


# --- the real site -------------------------------------------------------------------------------------------


def test_the_site_has_its_pages(site: Site) -> None:
    # An empty crawl would pass every check below.
    assert len(site.pages) >= 20 and "getting-started/" in site.pages and "intents/" in site.pages
    assert len(site.views) == len(site.pages) * len(VIEWPORTS)


def test_no_page_is_wider_than_the_window(site: Site) -> None:
    problems = wider_than_window(site)
    assert not problems, "\n".join(problems)


def test_no_block_is_cut(site: Site) -> None:
    problems = cut_blocks(site)
    assert not problems, "\n".join(problems)


def test_no_table_cell_breaks_a_word(site: Site) -> None:
    problems = broken_words(site)
    assert not problems, "\n".join(problems)


def test_every_page_is_reachable_from_the_home_page_by_the_nav(site: Site) -> None:
    problems = unreached(site)
    assert not problems, "\n".join(problems)


def test_the_home_page_points_to_the_sites_own_getting_started(site: Site) -> None:
    problems = home_page_faults(site)
    assert not problems, "\n".join(problems)


# --- the checks, on a planted site with every fault ----------------------------------------------------------

PLANTED_STYLE = """<style>
body { margin: 0; }
.md-content { width: 400px; }
pre > code { display: block; overflow: auto; white-space: pre; }
td { width: 60px; }
td code { word-break: break-all; }
.wide { width: 2000px; }
</style>"""
PLANTED_NAV = '<nav class="md-nav md-nav--primary"><a href="/">Home</a> <a href="/a/">A</a></nav>'
PLANTED_HOME = f"""<!doctype html><html><head>{PLANTED_STYLE}</head><body>{PLANTED_NAV}
<div class="md-content">
<p>The repository's README has the rest.</p>
<pre><code>{"an output line far longer than the box it is drawn in " * 4}</code></pre>
<table><tr><td><code>prefill_cuda_graph</code></td></tr></table>
<div class="wide">wide</div>
</div></body></html>"""
PLANTED_A = f"""<!doctype html><html><head></head><body>{PLANTED_NAV}<div class="md-content">A</div></body></html>"""


@pytest.fixture(scope="module")
def planted(browser: Browser, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    folder = tmp_path_factory.mktemp("planted-site")
    for page, text in {"": PLANTED_HOME, "a/": PLANTED_A, "orphan/": PLANTED_A}.items():
        (folder / page).mkdir(exist_ok=True)
        (folder / page / "index.html").write_text(text)
    with docs_site.served(folder) as base:
        yield Site(folder, base, _views(browser, base, docs_site.site_pages(folder)))


def test_the_checks_find_each_fault_on_a_planted_site(planted: Site) -> None:
    assert wider_than_window(planted)
    assert any("an output line" in p for p in cut_blocks(planted))
    assert any("'prefill_cuda_graph' drawn as prefill" in p for p in broken_words(planted))
    assert [p for p in unreached(planted) if p.startswith("/orphan/ ")] == [
        f"/orphan/ at {w} px: no nav link leads to it" for w in VIEWPORTS
    ]
    assert len(home_page_faults(planted)) == 2
