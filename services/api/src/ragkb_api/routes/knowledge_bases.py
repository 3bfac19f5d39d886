from __future__ import annotations

from litestar import Controller, delete, get, patch, post

from ragkb_api.access import Caller
from ragkb_api.schemas import KnowledgeBaseCreate, KnowledgeBaseOut, KnowledgeBaseUpdate
from ragkb_api.services import KnowledgeBaseService
from ragkb_http import access


class KnowledgeBaseController(Controller):
    path = "/v1/knowledge-bases"
    tags = ["knowledge bases"]

    @post("/", status_code=201, sync_to_thread=True, summary="Create a knowledge base", opt=access("admin"))
    def create(self, data: KnowledgeBaseCreate, kb_service: KnowledgeBaseService) -> KnowledgeBaseOut:
        return kb_service.create(data)

    @get("/", sync_to_thread=True, summary="List the knowledge bases this key may read", opt=access("caller"))
    def list_all(self, kb_service: KnowledgeBaseService, caller: Caller) -> list[KnowledgeBaseOut]:
        return kb_service.list(caller)

    @get(
        "/{kb_id:str}",
        sync_to_thread=True,
        summary="Get a knowledge base with document counts per status",
        opt=access("read"),
    )
    def get_one(self, kb_id: str, kb_service: KnowledgeBaseService) -> KnowledgeBaseOut:
        return kb_service.get(kb_id)

    @patch(
        "/{kb_id:str}", sync_to_thread=True, summary="Rename a KB or change its chunking settings", opt=access("admin")
    )
    def update(self, kb_id: str, data: KnowledgeBaseUpdate, kb_service: KnowledgeBaseService) -> KnowledgeBaseOut:
        return kb_service.update(kb_id, data)

    @delete(
        "/{kb_id:str}",
        status_code=204,
        sync_to_thread=True,
        summary="Delete a KB, its documents and index",
        opt=access("admin"),
    )
    def remove(self, kb_id: str, kb_service: KnowledgeBaseService) -> None:
        kb_service.delete(kb_id)
