"""The docs site as a reader's browser shows it: a built site served on loopback, and what headless
Chromium measures on each page (tests/integration/test_docs_site.py asserts on it).

Playwright drives Debian's chromium (/usr/bin/chromium): Playwright's own browser download does not work
on these machines, and ci/selftest.sh installs the Debian package when it runs as root.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urldefrag, urljoin, urlparse

if TYPE_CHECKING:
    from playwright.sync_api import Browser

CHROMIUM = Path("/usr/bin/chromium")
# No sandbox: the tests run as root in CI, where Chromium refuses its sandbox. The rest keeps a headless
# run off the network: no update checks, no sync, no QUIC probes, and no host but loopback resolves, so
# Material's fonts from Google are never fetched: every machine lays the pages out in the same fallback
# font, and one without the network does not wait on them.
CHROMIUM_ARGS = [
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, in one line; None when they can."""
    if not CHROMIUM.exists():
        return "headless Chromium not installed: apt-get install chromium (ci/selftest.sh does this as root)"
    if importlib.util.find_spec("playwright") is None:
        return "playwright not installed: pip install -e '.[test]'"
    return None


@contextmanager
def chromium() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """A line per request on stderr would bury a failure's report."""


@contextmanager
def served(folder: Path) -> Iterator[str]:
    """``folder`` over HTTP on 127.0.0.1 (an ephemeral port); yields the base URL, ending in '/'.

    file:// URLs would do for reading, but a site's links to folders (``getting-started/``) resolve to
    their index.html only through a server, as a reader's do."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/"
        finally:
            server.shutdown()
            thread.join()


def site_pages(site: Path) -> list[str]:
    """Every page of a built site as its path under the site ('' for the home page, 'ci/' ...), 404 left out."""
    found = []
    for index in site.rglob("index.html"):
        folder = index.parent.relative_to(site).as_posix()
        found.append("" if folder == "." else f"{folder}/")
    return sorted(p for p in found if p != "404/")


@dataclass(frozen=True)
class CutBlock:
    """A block whose content is wider than its box: what it starts with, and both widths in CSS px."""

    starts: str
    content_width: int
    box_width: int


@dataclass(frozen=True)
class BrokenWord:
    """A code span in a table cell that a line break splits inside a word: the span's text, and the
    text on each of its rendered lines."""

    text: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class PageView:
    """One page at one viewport width, as the browser laid it out."""

    page: str
    viewport: int
    page_width: int
    cut: tuple[CutBlock, ...]
    broken: tuple[BrokenWord, ...]
    nav_links: tuple[str, ...]
    content_links: tuple[str, ...]
    content_text: str

    @property
    def where(self) -> str:
        return f"/{self.page} at {self.viewport} px"


# Runs in the page. Cut: a code block (Material scrolls `pre > code`, so both are looked at) whose
# content is wider than its box. Broken word: the rendered lines of every code span
# in a table cell, found by the top of each character's box; a break is inside a word when the characters
# on both sides are letters or digits, or when it follows an option's leading dashes ("--" at the end of
# a line, "enforce-..." on the next). A break after '_', a word's '-', ',' or a space leaves whole words.
MEASURE = """() => {
  const cut = [];
  for (const el of document.querySelectorAll(
      '.md-content pre, .md-content pre > code')) {
    if (el.scrollWidth > el.clientWidth + 1) {
      cut.push({starts: el.textContent.trim().slice(0, 60), content_width: el.scrollWidth,
                box_width: el.clientWidth});
    }
  }
  const word = /[A-Za-z0-9]/;
  const broken = [];
  for (const code of document.querySelectorAll('.md-content td code, .md-content th code')) {
    const chars = [];
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.data.length; i++) {
        const range = document.createRange();
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        const rects = range.getClientRects();
        chars.push({c: node.data[i], top: rects.length ? rects[0].top : null});
      }
    }
    const lines = [''];
    let top = null;
    let bad = false;
    for (let i = 0; i < chars.length; i++) {
      const {c, top: t} = chars[i];
      if (t !== null && top !== null && t > top + 2) {
        let dash = i - 1;
        while (dash >= 0 && chars[dash].c === '-') dash--;
        const leadingDashes = dash < i - 1 && (dash < 0 || /[\\s(\\[{'"]/.test(chars[dash].c));
        if ((word.test(chars[i - 1].c) && word.test(c)) || leadingDashes) bad = true;
        lines.push('');
      }
      if (t !== null) top = t;
      lines[lines.length - 1] += c;
    }
    if (bad) broken.push({text: code.textContent, lines});
  }
  const content = document.querySelector('.md-content');
  const links = (selector) => [...document.querySelectorAll(selector)].map((a) => a.href);
  return {
    page_width: document.scrollingElement.scrollWidth,
    cut,
    broken,
    nav_links: links('nav.md-nav--primary a[href]'),
    content_links: links('.md-content a[href]'),
    content_text: content ? content.innerText : '',
  };
}"""


def views(browser: Browser, base: str, pages: list[str], widths: tuple[int, ...], height: int = 800) -> list[PageView]:
    """Every page of ``pages`` (paths under ``base``) measured at each width, one tab per width."""
    found: list[PageView] = []
    for width in widths:
        tab = browser.new_page(viewport={"width": width, "height": height})
        try:
            for page in pages:
                tab.goto(base + page, wait_until="load")
                found.append(_page_view(page, width, tab.evaluate(MEASURE)))
        finally:
            tab.close()
    return found


def _page_view(page: str, width: int, got: dict[str, Any]) -> PageView:
    return PageView(
        page=page,
        viewport=width,
        page_width=int(got["page_width"]),
        cut=tuple(CutBlock(**c) for c in got["cut"]),
        broken=tuple(BrokenWord(b["text"], tuple(b["lines"])) for b in got["broken"]),
        nav_links=tuple(got["nav_links"]),
        content_links=tuple(got["content_links"]),
        content_text=str(got["content_text"]),
    )


def site_path(base: str, url: str) -> str | None:
    """``url`` as a page path under ``base`` ('' for the home page), None when it leads off the site."""
    url = urldefrag(urljoin(base, url)).url
    if not url.startswith(base) or urlparse(url).scheme not in ("http", "https"):
        return None
    path = url.removeprefix(base).removesuffix("index.html")
    return path if not path or path.endswith("/") else None


def reached(home: PageView, views: dict[str, PageView], base: str) -> set[str]:
    """The pages a reader gets to from ``home`` by nav links alone (``views``: every page's view by path)."""
    seen = {home.page}
    todo = [home]
    while todo:
        current = todo.pop()
        for link in current.nav_links:
            path = site_path(base, link)
            if path is not None and path not in seen:
                seen.add(path)
                if path in views:
                    todo.append(views[path])
    return seen
