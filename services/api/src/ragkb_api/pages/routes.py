"""Pages outside the console that lead into it."""

from __future__ import annotations

from litestar import Controller, get
from litestar.response import Redirect

from ragkb_http import PUBLIC, access


class PageController(Controller):
    tags = ["pages"]

    # The search-test page is now the console's (Search test); old links and bookmarks land there.
    @get("/search-test", sync_to_thread=False, include_in_schema=False, opt=access(PUBLIC), security=[{}])
    def search_test(self) -> Redirect:
        return Redirect("/console/search", status_code=302)
