"""Static admin pages: public HTML holding no data; every data call they make carries the key the user types."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from litestar import Controller, MediaType, Response, get

from ragkb_http import PUBLIC, access

# The page's own inline script and style, and calls to this origin: nothing else loads or runs.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@cache
def page_html(name: str) -> str:
    return files("ragkb_api").joinpath("pages", name).read_text(encoding="utf-8")


class PageController(Controller):
    tags = ["pages"]

    # Public and out of the API description: the page is a tool around the admin-only search-test endpoint.
    @get("/search-test", sync_to_thread=False, include_in_schema=False, opt=access(PUBLIC), security=[{}])
    def search_test(self) -> Response[str]:
        return Response(page_html("search_test.html"), media_type=MediaType.HTML, headers=PAGE_HEADERS)
