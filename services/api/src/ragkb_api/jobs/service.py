"""Long operations as jobs: manifest sync and retry of every failed document of a KB; reading, listing and
cancelling jobs (re-index and KB deletion jobs too: ragkb_api.jobs.reindex, ragkb_api.knowledge_bases.deletion), and the
snapshots their event stream is made of.

A sync deletes its orphans synchronously, within the call (each one a `deleted` item of the job, done or
failed by the time the plan is answered); its uploads are items the job waits for until their documents
are indexed or failed (ragkb_store.progress)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.access import Caller, Permission
from ragkb_api.documents.service import DocumentService
from ragkb_api.jobs.schemas import (
    JobCounts,
    JobError,
    JobOut,
    JobProgress,
    LaneOut,
    QueueOut,
    SyncCounts,
    SyncDelete,
    SyncExcluded,
    SyncPlanOut,
    SyncRequest,
    SyncUpload,
)
from ragkb_api.jobs.sync import ManifestEntry, StoredDocument, SyncPlan, SyncRules, plan_sync
from ragkb_api.paging import Page, PageRequest
from ragkb_core.errors import Conflict, Forbidden, NotFound, RagkbError
from ragkb_core.kb_settings import KbSync
from ragkb_core.settings import JobSettings
from ragkb_store import progress
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Document, Job, JobItem
from ragkb_store.knowledge_bases import load_kb, load_writable_kb
from ragkb_store.ledger import EVERY_DOCUMENT, DocumentLedger
from ragkb_store.ledger.jobs import add_failed_item, add_items, requeue_failed_documents, settle_item, start_job
from ragkb_store.ledger.sources import begin_queued_job
from ragkb_store.quality_gate import QualityCheck
from ragkb_store.queue import IngestQueue
from ragkb_store.states import FINISHED_JOB_STATUSES, ITEMLESS_KINDS, ItemAction, JobKind, Lane

_log = logging.getLogger("ragkb.api.jobs")
RECENT_JOBS = 50


@dataclass(frozen=True)
class SourceRun:
    """What a source run lists, for its sync: each item's checksum by key, the items that could not be read
    (key, reason: their documents are kept), the prefix of the source's documents' source_ids, and whether
    the KB's eligible extensions apply to the keys."""

    prefix: str
    checksums: dict[str, str]
    problems: list[tuple[str, str]] = field(default_factory=list)
    check_extensions: bool = True


@dataclass(frozen=True)
class SettledItem:
    id: int
    source_id: str
    action: str
    status: str
    message: str | None


@dataclass(frozen=True)
class JobSnapshot:
    """A job as its event stream sees it: the items settled since the last look, and the job itself."""

    job: JobOut
    newly_settled: list[SettledItem]
    finished: bool


class JobService:
    def __init__(
        self, sessions: sessionmaker[Session], documents: DocumentService, queue: IngestQueue, settings: JobSettings
    ) -> None:
        self._sessions = sessions
        self._documents = documents
        self._queue = queue
        self._settings = settings
        self._ledger = DocumentLedger(sessions)

    # -- sync --------------------------------------------------------------------------------------------

    def sync(self, kb_id: str, request: SyncRequest, caller: Caller) -> SyncPlanOut:
        """Plan the KB's documents against the manifest. A key with a search filter syncs the documents inside
        it: one outside is neither compared nor deleted as an orphan."""
        with self._sessions() as session:
            kb = load_writable_kb(session, kb_id)
            rules = SyncRules.of(KbSync.model_validate(kb.sync))
            stored = _stored_documents(session, kb_id, caller)
        manifest = [ManifestEntry(file.source_id, file.sha256) for file in request.files]
        plan = plan_sync(manifest, stored, rules)
        if request.dry_run:
            return _plan_out(plan, None)
        versions = {document.source_id: document.version for document in stored}
        shas = {entry.source_id: entry.sha256 for entry in manifest}
        job_id = self._record_sync_job(kb_id, plan, shas, versions)
        assert job_id is not None  # a new job is never cancelled before it exists
        self._delete_orphans(kb_id, job_id, plan.delete, caller)
        with transaction(self._sessions) as session:
            progress.refresh_job(session, session.get_one(Job, job_id), self._settings.upload_wait_s)
        return _plan_out(plan, job_id)

    def sync_source(self, kb_id: str, job_id: str, run: SourceRun, caller: Caller) -> SyncPlan | None:
        """A source run's sync, in its queued job: plan the listed items against the documents the source
        made (source_id `name:key`, compared by key under the KB's sync rules), record the plan in the job and
        delete the orphans. Returns the plan by key (the uploads are the runner's), or None when the job was
        cancelled while queued."""
        with self._sessions() as session:
            kb = load_writable_kb(session, kb_id)
            rules = SyncRules.of(KbSync.model_validate(kb.sync), check_extensions=run.check_extensions)
            stored = [doc for doc in _stored_documents(session, kb_id, caller) if doc.source_id.startswith(run.prefix)]
        by_key = [replace(doc, source_id=doc.source_id.removeprefix(run.prefix)) for doc in stored]
        plan = plan_sync([ManifestEntry(key, sha) for key, sha in run.checksums.items()], by_key, rules)
        # An item that could not be read is neither uploaded nor deleted: its document stays as it is.
        unread = {key for key, _ in run.problems}
        plan.delete = [(key, document_id) for key, document_id in plan.delete if key not in unread]
        plan.errors += run.problems
        named = _prefixed(plan, run.prefix)
        versions = {document.source_id: document.version for document in stored}
        shas = {run.prefix + key: sha for key, sha in run.checksums.items()}
        if self._record_sync_job(kb_id, named, shas, versions, queued_job_id=job_id) is None:
            return None
        self._delete_orphans(kb_id, job_id, named.delete, caller)
        return plan

    def _record_sync_job(
        self,
        kb_id: str,
        plan: SyncPlan,
        shas: dict[str, str],
        versions: dict[str, int],
        queued_job_id: str | None = None,
    ) -> str | None:
        """The sync's job (a new one, or the queued source run `queued_job_id` started) with the plan's items;
        None when the queued job was cancelled meanwhile."""
        with transaction(self._sessions) as session:
            if queued_job_id is None:
                job_id = start_job(session, JobKind.SYNC, kb_id, unchanged=len(plan.unchanged))
            elif begin_queued_job(session, queued_job_id, unchanged=len(plan.unchanged)):
                job_id = queued_job_id
            else:
                return None
            uploads = [source_id for source_id, _ in plan.upload]
            add_items(session, job_id, kb_id, ItemAction.UPLOAD, uploads, shas=shas, base_versions=versions)
            add_items(session, job_id, kb_id, ItemAction.DELETE, [source_id for source_id, _ in plan.delete])
            for source_id, message in plan.errors:
                add_failed_item(session, job_id, kb_id, source_id, action=ItemAction.CHECK, message=message)
        return job_id

    def _delete_orphans(self, kb_id: str, job_id: str, orphans: list[tuple[str, str]], caller: Caller) -> None:
        for source_id, document_id in orphans:
            message = None
            try:
                self._documents.delete(kb_id, document_id, caller)
            except NotFound:
                pass  # deleted meanwhile: what the sync wanted
            except RagkbError as exc:
                message = f"could not delete: {exc.detail}"
            with transaction(self._sessions) as session:
                settle_item(session, job_id, source_id, ItemAction.DELETE, message)

    # -- retry ---------------------------------------------------------------------------------------------

    def retry_failed(self, kb_id: str, caller: Caller) -> JobOut:
        """Queue every failed document of the KB again, from its stored original, as one job."""
        with transaction(self._sessions) as session:
            load_writable_kb(session, kb_id)
            job_id = start_job(session, JobKind.RETRY, kb_id)
            document_ids, lane = requeue_failed_documents(
                session, job_id, kb_id, caller.document_scope, self._settings.interactive_max_documents
            )
        self._enqueue(kb_id, [(document_id, lane) for document_id in document_ids])
        with transaction(self._sessions) as session:
            job = session.get_one(Job, job_id)
            progress.refresh_job(session, job, self._settings.upload_wait_s)
            return _job_out(session, job)

    # -- reading and cancelling -----------------------------------------------------------------------------

    def queue(self, kb_id: str) -> QueueOut:
        lanes = self._ledger.queue_counts(kb_id)
        interactive, bulk = lanes[Lane.INTERACTIVE], lanes[Lane.BULK]
        return QueueOut(
            knowledge_base_id=kb_id,
            interactive=LaneOut(pending=interactive.pending, processing=interactive.processing),
            bulk=LaneOut(pending=bulk.pending, processing=bulk.processing),
        )

    def get(self, job_id: str, caller: Caller) -> JobOut:
        with transaction(self._sessions) as session:
            job = _load_job(session, job_id, caller, "read")
            progress.refresh_job(session, job, self._settings.upload_wait_s)
            return _job_out(session, job)

    def list_for_kb(self, kb_id: str, caller: Caller, kind: JobKind | None, page: PageRequest) -> Page[JobOut]:
        """A page of the KB's jobs, newest first: of one kind, or every kind but the one-document `ingest` runs
        (those are listed when asked for: one per version of each document, and only of the documents the
        caller's search filter lets it see)."""
        kinds = Job.kind == kind if kind is not None else Job.kind != JobKind.INGEST
        with transaction(self._sessions) as session:
            load_kb(session, kb_id)
            query = select(Job).where(Job.kb_id == kb_id, kinds).order_by(Job.created_at.desc(), Job.id)
            if caller.document_scope == EVERY_DOCUMENT:
                total = session.scalar(select(func.count()).select_from(query.order_by(None).subquery())) or 0
                jobs = list(session.scalars(query.limit(page.limit).offset(page.offset)))
            else:
                visible = [job for job in session.scalars(query) if _visible(session, job, caller)]
                total, jobs = len(visible), visible[page.offset : page.offset + page.limit]
            for job in jobs:
                progress.refresh_job(session, job, self._settings.upload_wait_s)
            return Page([_job_out(session, job) for job in jobs], total, page)

    def cancel(self, job_id: str, caller: Caller) -> JobOut:
        with transaction(self._sessions) as session:
            job = _load_job(session, job_id, caller, "write")
            if job.kind == JobKind.KB_DELETE and job.status not in FINISHED_JOB_STATUSES:
                # Its first step drops the index: there is no KB to go back to, only DELETE again to finish.
                raise Conflict(
                    "a knowledge-base deletion cannot be cancelled (its index is dropped first); "
                    "if it failed, DELETE the knowledge base again to finish it",
                    job_status=job.status,
                )
            progress.refresh_job(session, job, self._settings.upload_wait_s)
            if not progress.cancel_job(session, job):
                raise Conflict(f"job {job_id} is already {job.status}", job_status=job.status)
            return _job_out(session, job)

    def check_readable(self, job_id: str, caller: Caller) -> None:
        with self._sessions() as session:
            _load_job(session, job_id, caller, "read")

    def snapshot(self, job_id: str, reported: set[int]) -> JobSnapshot:
        """The job now, and its items settled since those in `reported` (which this adds them to)."""
        with transaction(self._sessions) as session:
            job = session.get(Job, job_id)
            if job is None:
                raise NotFound(f"job {job_id} no longer exists")
            progress.refresh_job(session, job, self._settings.upload_wait_s)
            new = [_settled(item) for item in progress.settled_items(session, job_id) if item.id not in reported]
            reported.update(item.id for item in new)
            return JobSnapshot(_job_out(session, job), new, job.status in FINISHED_JOB_STATUSES)

    def _enqueue(self, kb_id: str, documents: list[tuple[str, Lane]]) -> None:
        try:
            self._queue.send_batch(kb_id, documents)
        except Exception:  # the broker is down: the documents are pending, the worker's sweeper queues them later
            _log.warning("could not queue %d documents now; the sweeper will queue them", len(documents), exc_info=True)


def _load_job(session: Session, job_id: str, caller: Caller, permission: Permission) -> Job:
    """The job, if the caller may read its KB (jobs of no KB: admins only). Unknown and ungranted ids get
    the same answer; a reader asking to change it gets 403."""
    job = session.get(Job, job_id)
    readable = job is not None and (caller.is_admin or (job.kb_id is not None and caller.may(job.kb_id, "read")))
    if job is None or not readable:
        raise NotFound(f"job {job_id} does not exist or is not yours")
    if permission == "write" and not caller.may(job.kb_id or "", "write"):
        raise Forbidden(f"this key may read knowledge base {job.kb_id} but not change it")
    return job


def _visible(session: Session, job: Job, caller: Caller) -> bool:
    """A document's run is shown to a key whose filter lets it see the document (or that has no filter)."""
    if job.document_id is None or caller.document_scope == EVERY_DOCUMENT:
        return True
    document = session.get(Document, job.document_id)
    return document is not None and caller.document_scope.admits(document.labels, document.doc_type)


def _stored_documents(session: Session, kb_id: str, caller: Caller) -> list[StoredDocument]:
    scope = caller.document_scope
    rows = session.execute(
        select(
            Document.id,
            Document.source_id,
            Document.blob_sha256,
            Document.status,
            Document.version,
            Document.labels,
            Document.doc_type,
        ).where(Document.kb_id == kb_id)
    )
    return [
        StoredDocument(document_id, source_id, sha, status, version)
        for document_id, source_id, sha, status, version, labels, doc_type in rows
        if scope.admits(labels, doc_type)
    ]


def _prefixed(plan: SyncPlan, prefix: str) -> SyncPlan:
    """The plan with its keys as the documents' source_ids."""
    return SyncPlan(
        upload=[(prefix + key, reason) for key, reason in plan.upload],
        unchanged=[prefix + key for key in plan.unchanged],
        delete=[(prefix + key, document_id) for key, document_id in plan.delete],
        excluded=[(prefix + key, reason) for key, reason in plan.excluded],
        errors=[(prefix + key, message) for key, message in plan.errors],
    )


def _settled(item: JobItem) -> SettledItem:
    return SettledItem(item.id, item.source_id, item.action, item.status, item.message)


def _plan_out(plan: SyncPlan, job_id: str | None) -> SyncPlanOut:
    excluded = [SyncExcluded(source_id=s, reason=r) for s, r in plan.excluded]
    excluded += [SyncExcluded(source_id=s, reason=f"error: {m}") for s, m in plan.errors]
    return SyncPlanOut(
        job_id=job_id,
        upload=[SyncUpload(source_id=s, reason=r) for s, r in plan.upload],
        unchanged=plan.unchanged,
        delete=[SyncDelete(source_id=s, document_id=d) for s, d in plan.delete],
        excluded=excluded,
        counts=SyncCounts(
            upload=len(plan.upload), unchanged=len(plan.unchanged), delete=len(plan.delete), excluded=len(excluded)
        ),
    )


def _job_out(session: Session, job: Job) -> JobOut:
    if job.kind in ITEMLESS_KINDS:  # one document's run, a tune: no items, their own record
        counts, errors = (
            JobCounts(**{k: v for k, v in job.counts.items() if k in JobCounts.model_fields}),
            [JobError(source_id=None, message=str(error)) for error in job.errors],
        )
        current, total = job.progress_current, job.progress_total
    else:
        tally = progress.tally_job(session, job)
        counts = JobCounts(**progress.counts_of(tally))
        errors = [JobError(**error) for error in progress.item_errors(session, job.id)]
        errors += [JobError(source_id=None, message=str(error)) for error in job.errors]
        current, total = tally.current, tally.total
    return JobOut(
        id=job.id,
        kind=job.kind,
        knowledge_base_id=job.kb_id,
        document_id=job.document_id,
        status=job.status,
        progress=JobProgress(current=current, total=total),
        counts=counts,
        errors=errors,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        quality_check=_quality_check(job),
        source_id=job.params.get("source_id") if job.params else None,
    )


def _quality_check(job: Job) -> QualityCheck | None:
    recorded = job.params.get("quality_check") if job.params else None
    return QualityCheck.model_validate(recorded) if recorded else None
