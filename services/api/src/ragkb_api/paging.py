"""Paging of every list endpoint, one way: `limit` and `offset` query parameters, the items as the body (a
JSON array, as before), the total in `X-Total-Count` and the next page in `Link: <…>; rel="next"` (RFC 8288).
A list without `limit` answers at most MAX_PAGE items: a client that wants everything follows the links."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar
from urllib.parse import urlencode

from litestar import Request, Response
from litestar.datastructures import ResponseHeader
from litestar.params import Parameter

T = TypeVar("T")
MAX_PAGE = 10_000

Limit = Annotated[int, Parameter(ge=1, le=MAX_PAGE, description=f"items in this page (at most {MAX_PAGE})")]
Offset = Annotated[int, Parameter(ge=0, description="items to skip (the Link header gives the next)")]
PAGE_HEADERS = [
    ResponseHeader(name="X-Total-Count", description="how many items the list holds in all", documentation_only=True),
    ResponseHeader(
        name="Link", description='the next page as `<url>; rel="next"` while there is one', documentation_only=True
    ),
]


@dataclass(frozen=True)
class PageRequest:
    limit: int = MAX_PAGE
    offset: int = 0


@dataclass(frozen=True)
class Page(Generic[T]):
    items: list[T]
    total: int
    request: PageRequest

    @property
    def next_offset(self) -> int | None:
        following = self.request.offset + len(self.items)
        return following if self.items and following < self.total else None


def page_of(items: Sequence[T], request: PageRequest) -> Page[T]:
    """A page of a list already in hand."""
    return Page(list(items[request.offset : request.offset + request.limit]), len(items), request)


def paged_response(page: Page[T], request: Request[Any, Any, Any]) -> Response[list[T]]:
    headers = {"X-Total-Count": str(page.total)}
    if page.next_offset is not None:
        query = {key: value for key, value in request.query_params.items() if key not in ("limit", "offset")}
        query |= {"limit": str(page.request.limit), "offset": str(page.next_offset)}
        headers["Link"] = f'<{request.url.path}?{urlencode(query)}>; rel="next"'
    return Response(page.items, headers=headers)
