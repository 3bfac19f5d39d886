"""A source run: claim the source, list its items, sync them into the KB through the manifest sync (only new
and changed items are uploaded, orphans deleted), then free the source with the run's result and its next
run time. Runs happen on this api's threads; the claim (ragkb_store.ledger.sources) makes sure no other
thread, scheduler or replica runs the same source at once."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.access import Caller
from ragkb_api.documents.schemas import DocumentFields
from ragkb_api.documents.service import DocumentService, Upload
from ragkb_api.jobs.service import JobService, SourceRun
from ragkb_api.sources.base import RunStopped, SourceItem
from ragkb_api.sources.connectors import CONFIG, build_connector
from ragkb_api.sources.credentials import CredentialVault
from ragkb_api.sources.s3 import KnownObject
from ragkb_api.sources.schedule import next_run
from ragkb_core.errors import RagkbError
from ragkb_core.settings import SourceSettings
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, Source, utcnow
from ragkb_store.ledger.jobs import settle_item
from ragkb_store.ledger.sources import RunOutcome, SourceLedger, fail_queued_job
from ragkb_store.states import ItemAction, SourceRunStatus

_log = logging.getLogger("ragkb.api.sources")
# Runs at once in this process: each holds one listing in memory and uploads one item at a time.
RUN_THREADS = 2


def document_prefix(source_name: str) -> str:
    """What the source_ids of a source's documents start with: its name and a colon, then the item's key."""
    return f"{source_name}:"


class SourceRunner:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        ledger: SourceLedger,
        jobs: JobService,
        documents: DocumentService,
        *,
        vault: CredentialVault,
        settings: SourceSettings,
        max_bytes: int,
    ) -> None:
        self._sessions = sessions
        self._ledger = ledger
        self._jobs = jobs
        self._documents = documents
        self._vault = vault
        self._settings = settings
        self._max_bytes = max_bytes
        # Names this process's claims: a lease held by another owner is never renewed or freed here.
        self.owner = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._pool = ThreadPoolExecutor(RUN_THREADS, thread_name_prefix="ragkb-source-run")
        self._stopping = threading.Event()

    def start(self, source_id: str) -> str | None:
        """Claim the source and run it in the background; the run's job id, or None when it is taken."""
        job_id = self._ledger.claim(source_id, self.owner)
        if job_id is not None:
            self._pool.submit(self.run, source_id, job_id)
        return job_id

    def stop(self) -> None:
        """Runs in progress stop at their next item (their sources are freed when the lease passes)."""
        self._stopping.set()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def run(self, source_id: str, job_id: str) -> None:
        with self._sessions() as session:
            source = session.get(Source, source_id)
            if source is None:
                return
            schedule = (source.interval_s, source.cron)
        try:
            self._run(source, job_id)
            outcome = RunOutcome(SourceRunStatus.SUCCEEDED, None, next_run(*schedule, utcnow()))
        except RunStopped as stopped:
            # Another owner has the source now, or the api is stopping: the job says so, the source is not
            # touched (its lease is the new owner's, or passes).
            with transaction(self._sessions) as session:
                fail_queued_job(session, job_id, f"stopped: {stopped}")
            return
        except Exception as exc:
            message = exc.detail if isinstance(exc, RagkbError) else f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, RagkbError):
                _log.exception("source %s: run %s failed", source_id, job_id)
            with transaction(self._sessions) as session:
                fail_queued_job(session, job_id, message)
            outcome = RunOutcome(SourceRunStatus.FAILED, message, next_run(*schedule, utcnow()))
        self._ledger.finish(source_id, self.owner, outcome)

    def _run(self, source: Source, job_id: str) -> None:
        caller = Caller(key_id=f"source:{source.id}", role="admin")
        config = CONFIG.validate_python(source.config)
        credentials = self._vault.open(source.credentials)
        prefix = document_prefix(source.name)
        known = self._known_items(source.kb_id, prefix)
        connector = build_connector(config, credentials, self._settings, self._max_bytes, known)
        keep_alive = self._keep_alive(source.id)
        with connector.listing(keep_alive) as items:
            by_key = {item.key: item for item in items}
            run = SourceRun(
                prefix=prefix,
                checksums={key: item.sha256 for key, item in by_key.items() if item.problem is None},
                problems=[(key, item.problem) for key, item in by_key.items() if item.problem is not None],
                check_extensions=connector.checks_extensions,
            )
            plan = self._jobs.sync_source(source.kb_id, job_id, run, caller)
            if plan is None:
                raise RunStopped("the run's job was cancelled")
            for key, _ in plan.upload:
                if not keep_alive():
                    raise RunStopped("the run no longer holds its source")
                self._upload(source, job_id, by_key[key], caller)

    def _upload(self, source: Source, job_id: str, item: SourceItem, caller: Caller) -> None:
        source_id = document_prefix(source.name) + item.key
        metadata = {
            "source": source.name,
            **({"url": item.url} if item.url else {}),
            **({"etag": item.etag} if item.etag else {}),
        }
        fields = DocumentFields(source_id=source_id, title=item.title, metadata=metadata)
        try:
            self._documents.accept(source.kb_id, fields, Upload(item.read(), item.filename, item.media_type), caller)
        except (RagkbError, OSError) as exc:
            message = exc.detail if isinstance(exc, RagkbError) else str(exc)
            with transaction(self._sessions) as session:
                settle_item(session, job_id, source_id, ItemAction.UPLOAD, f"could not upload: {message}")

    def _known_items(self, kb_id: str, prefix: str) -> dict[str, KnownObject]:
        """The ETag and content sha256 of each of the source's documents that has an ETag, by item key."""
        query = select(Document.source_id, Document.metadata_, Document.blob_sha256).where(
            Document.kb_id == kb_id, Document.source_id.startswith(prefix, autoescape=True)
        )
        with self._sessions() as session:
            return {
                source_id.removeprefix(prefix): KnownObject(str(metadata["etag"]), sha256)
                for source_id, metadata, sha256 in session.execute(query)
                if isinstance(metadata, dict) and metadata.get("etag")
            }

    def _keep_alive(self, source_id: str) -> KeepAliveCheck:
        return KeepAliveCheck(self._ledger, source_id, self.owner, self._stopping)


class KeepAliveCheck:
    """Renews the run's lease as it advances (at most every few seconds); False once the run must stop."""

    RENEW_EVERY_S = 5.0

    def __init__(self, ledger: SourceLedger, source_id: str, owner: str, stopping: threading.Event) -> None:
        self._ledger, self._source_id, self._owner, self._stopping = ledger, source_id, owner, stopping
        self._renewed_at = 0.0

    def __call__(self) -> bool:
        if self._stopping.is_set():
            return False
        now = time.monotonic()
        if now - self._renewed_at < self.RENEW_EVERY_S:
            return True
        self._renewed_at = now
        return self._ledger.renew(self._source_id, self._owner)
