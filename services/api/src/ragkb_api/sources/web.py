"""A web site: from a start URL (and the site's sitemap.xml), the pages of the same origin, breadth first to
`max_depth` links and at most `max_pages` pages, those robots.txt allows this crawler, of the content types
asked for. HTML is stored as fetched: the worker's HTML parser removes the boilerplate (navigation, scripts)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import PurePosixPath
from urllib.parse import urldefrag, urljoin, urlsplit
from urllib.robotparser import RobotFileParser
from xml.etree import ElementTree

import httpx

from ragkb_api.sources.base import (
    KeepAlive,
    SourceItem,
    SourceUnreadable,
    authorization_header,
    check_alive,
    sha256_hex,
)

USER_AGENT = "ragkb-connector"
HTML = "text/html"


@dataclass(frozen=True)
class CrawlLimits:
    max_depth: int
    max_pages: int
    content_types: tuple[str, ...]
    max_bytes: int


class WebConnector:
    checks_extensions = False  # pages are chosen by content type: a page's URL often has no extension

    def __init__(self, start_url: str, limits: CrawlLimits, credentials: Mapping[str, str], timeout_s: float) -> None:
        self._start = urldefrag(start_url).url
        self._origin = _origin(start_url)
        self._limits = limits
        header = authorization_header(credentials)
        headers = {"User-Agent": USER_AGENT, **({"Authorization": header} if header else {})}
        self._http = httpx.Client(headers=headers, timeout=timeout_s, follow_redirects=True)

    def listing(self, keep_alive: KeepAlive) -> AbstractContextManager[list[SourceItem]]:
        with self._http:
            robots = self._robots()
            if not robots.can_fetch(USER_AGENT, self._start):
                raise SourceUnreadable(f"robots.txt of {self._origin} does not let ragkb read {self._start}")
            return nullcontext(list(self._crawl(robots, keep_alive)))

    def _robots(self) -> RobotFileParser:
        robots = RobotFileParser()
        try:
            response = self._http.get(f"{self._origin}/robots.txt")
        except httpx.HTTPError as exc:
            raise SourceUnreadable(f"{self._origin} does not answer: {exc}") from None
        # No robots.txt (4xx) lets every page be read; parse() of nothing allows everything.
        robots.parse(response.text.splitlines() if response.status_code == 200 else [])
        return robots

    def _crawl(self, robots: RobotFileParser, keep_alive: KeepAlive) -> Iterator[SourceItem]:
        seeds = [self._start, *self._sitemap_urls(robots)]
        queue = deque((url, 0) for url in dict.fromkeys(seeds))
        seen = set(url for url, _ in queue)
        pages = 0
        while queue and pages < self._limits.max_pages:
            check_alive(keep_alive)
            url, depth = queue.popleft()
            if not robots.can_fetch(USER_AGENT, url):
                continue
            page = self._fetch(url)
            if url == self._start and (page is None or page.item.problem):
                # Without its start page the crawl would find nothing and every document would look deleted.
                problem = page.item.problem if page else "not found or not of a content type asked for"
                raise SourceUnreadable(f"the start page {url} cannot be read: {problem}")
            if page is None:
                continue
            pages += 1
            yield page.item
            if depth < self._limits.max_depth:
                for link in page.links:
                    if link not in seen and _origin(link) == self._origin:
                        seen.add(link)
                        queue.append((link, depth + 1))

    def _sitemap_urls(self, robots: RobotFileParser) -> list[str]:
        """The same-origin <loc> URLs of the sitemaps robots.txt names, or of /sitemap.xml."""
        urls: list[str] = []
        for sitemap in robots.site_maps() or [f"{self._origin}/sitemap.xml"]:
            if _origin(sitemap) != self._origin:
                continue
            try:
                response = self._http.get(sitemap)
            except httpx.HTTPError:
                continue
            if response.status_code == 200:
                urls += [url for url in _locations(response.content) if _origin(url) == self._origin]
        return urls

    def _fetch(self, url: str) -> _Page | None:
        """The page as an item and its links; None when it is not there or not of a content type asked for.
        A page that fails to load is an item with a problem: its document, if any, is kept."""
        try:
            with self._http.stream("GET", url) as response:
                if response.status_code in (404, 410):
                    return None  # gone: its document goes too
                response.raise_for_status()
                media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if media_type not in self._limits.content_types or _origin(str(response.url)) != self._origin:
                    return None
                body = _read_within(response, self._limits.max_bytes)
        except (httpx.HTTPError, _TooLarge) as exc:
            return _Page(_failed_item(url, str(exc) or type(exc).__name__), [])
        return _page(url, body, media_type)


@dataclass(frozen=True)
class _Page:
    item: SourceItem
    links: list[str]


class _TooLarge(Exception):
    pass


def _read_within(response: httpx.Response, max_bytes: int) -> bytes:
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > max_bytes:
            raise _TooLarge(f"more than the {max_bytes} bytes an upload may have")
    return bytes(body)


def _page(url: str, body: bytes, media_type: str) -> _Page:
    links: list[str] = []
    title = None
    if media_type == HTML:
        reader = _LinkReader()
        reader.feed(body.decode("utf-8", errors="replace"))
        links = [urldefrag(urljoin(url, href)).url for href in reader.links]
        title = reader.title.strip() or None
    item = SourceItem(
        key=url,
        sha256=sha256_hex(body),
        read=lambda: body,
        filename=_filename(url, media_type),
        media_type=media_type,
        title=title,
        url=url,
    )
    return _Page(item, links)


def _failed_item(url: str, problem: str) -> SourceItem:
    return SourceItem(key=url, sha256="", read=bytes, filename=_filename(url, ""), url=url, problem=problem)


def _filename(url: str, media_type: str) -> str:
    """The URL's last segment, with .html for an HTML page without it (the worker detects the format from it
    as well as from the content type)."""
    name = PurePosixPath(urlsplit(url).path).name or "index"
    if media_type == HTML and not name.endswith((".html", ".htm")):
        name += ".html"
    return name


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _locations(sitemap: bytes) -> list[str]:
    try:
        # The stdlib expat parser expands no external entities.
        root = ElementTree.fromstring(sitemap)
    except ElementTree.ParseError:
        return []
    return [element.text.strip() for element in root.iter() if element.tag.endswith("loc") and element.text]


class _LinkReader(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href and not href.startswith(("mailto:", "javascript:", "tel:")):
                self.links.append(href)
        self._in_title = tag == "title"

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
