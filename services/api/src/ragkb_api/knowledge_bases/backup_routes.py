"""Routes of a KB's backup (an archive download) and of a restore (an archive upload that makes a new KB)."""

from __future__ import annotations

import os
import re
import tempfile
import time
from typing import Any

from anyio.to_thread import run_sync
from litestar import Request, Router, post
from litestar.background_tasks import BackgroundTask
from litestar.datastructures import UploadFile
from litestar.response import File

from ragkb_api.knowledge_bases.backup import BackupService
from ragkb_api.knowledge_bases.schemas import RestoreOut
from ragkb_core.errors import InvalidInput, UnsupportedMediaType
from ragkb_http import access

BACKUP_DESCRIPTION = """A .tar.gz of the KB: its settings, every document's metadata, the indexed version's points
with their vectors, and the stored originals and extracted texts. POST /v1/knowledge-bases/restore makes a new
KB of it, on this server or another with the same default embedding model; searches answer as before."""
RESTORE_DESCRIPTION = """Multipart: `file` (an archive from POST …/backup), optional `name` (default: the backed-up
KB's name; 409 when a KB has it). The KB is created with new ids, the points written as they were (nothing is
embedded again), the documents recorded last; documents the backup holds without points are built again from
their originals. A malformed archive answers 422 and leaves nothing behind. Body limit:
RAGKB_LIMITS__MAX_RESTORE_BYTES."""
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


@post(
    "/{kb_id:str}/backup",
    status_code=200,
    summary="Back up a KB as one archive (.tar.gz)",
    description=BACKUP_DESCRIPTION,
    opt=access("admin"),
    media_type="application/gzip",
)
async def backup(kb_id: str, backup_service: BackupService) -> File:
    handle, path = tempfile.mkstemp(prefix="ragkb-backup-", suffix=".tar.gz")
    try:
        with os.fdopen(handle, "wb") as target:
            name = await run_sync(backup_service.backup, kb_id, target)
    except BaseException:
        os.unlink(path)
        raise
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return File(
        path=path,
        filename=f"{_UNSAFE_NAME.sub('_', name)[:100]}-{stamp}.ragkb.tar.gz",
        media_type="application/gzip",
        background=BackgroundTask(os.unlink, path),
    )


@post(
    "/restore",
    status_code=201,
    summary="Restore a KB from a backup archive, as a new KB",
    description=RESTORE_DESCRIPTION,
    opt=access("admin"),
)
async def restore(request: Request[Any, Any, Any], backup_service: BackupService) -> RestoreOut:
    if request.content_type[0] != "multipart/form-data":
        raise UnsupportedMediaType(
            "send the archive as multipart/form-data (`file`)", supported_media_types=["multipart/form-data"]
        )
    form = await request.form()
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise InvalidInput("a restore needs a `file` part: the archive")
    name = str(form.get("name") or "").strip() or None
    report = await run_sync(backup_service.restore, upload.file, name)
    return RestoreOut(
        knowledge_base=report.knowledge_base, documents=report.documents, points=report.points, queued=report.queued
    )


def backup_router(max_restore_bytes: int) -> Router:
    """Under /v1/knowledge-bases, with the restore's own body limit (an archive is larger than an upload)."""
    return Router(
        path="/v1/knowledge-bases",
        route_handlers=[backup, restore],
        tags=["knowledge bases"],
        request_max_body_size=max_restore_bytes,
    )
