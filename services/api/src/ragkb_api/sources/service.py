"""Sources of a KB: create (checked, credentials sealed), list, read, delete, and run now. The runs
themselves are ragkb_api.sources.runner's; the schedule's loop is ragkb_api.sources.scheduler's."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.sources.connectors import CONFIG, check_config
from ragkb_api.sources.credentials import CredentialVault
from ragkb_api.sources.runner import SourceRunner
from ragkb_api.sources.schedule import check_cron
from ragkb_api.sources.schemas import SourceCreate, SourceOut
from ragkb_core.errors import Conflict, InvalidInput, NotFound
from ragkb_core.ids import new_id
from ragkb_core.settings import SourceSettings
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Source, utcnow
from ragkb_store.knowledge_bases import load_kb, load_writable_kb
from ragkb_store.progress import as_utc


class SourceService:
    def __init__(
        self, sessions: sessionmaker[Session], vault: CredentialVault, runner: SourceRunner, settings: SourceSettings
    ) -> None:
        self._sessions = sessions
        self._vault = vault
        self._runner = runner
        self._settings = settings

    def create(self, kb_id: str, data: SourceCreate) -> SourceOut:
        """A scheduled source is due at once: its first run fills the KB without waiting a whole interval."""
        check_config(data.config, self._settings)
        if data.cron is not None:
            check_cron(data.cron)
        if data.interval_s is not None and data.interval_s < self._settings.min_interval_s:
            raise InvalidInput(
                f"interval_s is at least {self._settings.min_interval_s} (RAGKB_SOURCES__MIN_INTERVAL_S)"
            )
        sealed = self._vault.seal(data.credentials.plain()) if data.credentials else None
        scheduled = data.interval_s is not None or data.cron is not None
        source = Source(
            id=new_id(),
            kb_id=kb_id,
            name=data.name,
            kind=data.config.kind,
            config=data.config.model_dump(),
            credentials=sealed,
            interval_s=data.interval_s,
            cron=data.cron,
            next_run_at=utcnow() if scheduled else None,
            created_at=utcnow(),
        )
        try:
            with transaction(self._sessions) as session:
                load_writable_kb(session, kb_id)
                session.add(source)
                session.flush()
                return source_out(source)
        except IntegrityError:
            raise Conflict(f"knowledge base {kb_id} already has a source named {data.name!r}") from None

    def list(self, kb_id: str) -> list[SourceOut]:
        with self._sessions() as session:
            load_kb(session, kb_id)
            rows = session.scalars(select(Source).where(Source.kb_id == kb_id).order_by(Source.created_at, Source.id))
            return [source_out(source) for source in rows]

    def get(self, kb_id: str, source_id: str) -> SourceOut:
        with self._sessions() as session:
            return source_out(_load(session, kb_id, source_id))

    def delete(self, kb_id: str, source_id: str) -> None:
        """The source goes; its documents stay (delete them as any other, or sync the KB without them)."""
        with transaction(self._sessions) as session:
            session.delete(_load(session, kb_id, source_id))

    def run(self, kb_id: str, source_id: str) -> str:
        """Start a run now; its job's id. 409 while a run of this source is in progress."""
        with self._sessions() as session:
            load_writable_kb(session, kb_id)
            _load(session, kb_id, source_id)
        job_id = self._runner.start(source_id)
        if job_id is None:
            raise Conflict(f"source {source_id} is running already")
        return job_id


def _load(session: Session, kb_id: str, source_id: str) -> Source:
    load_kb(session, kb_id)
    source = session.get(Source, source_id)
    if source is None or source.kb_id != kb_id:
        raise NotFound(f"source {source_id} does not exist in knowledge base {kb_id}")
    return source


def source_out(source: Source) -> SourceOut:
    lease = source.lease_until
    return SourceOut(
        id=source.id,
        knowledge_base_id=source.kb_id,
        name=source.name,
        kind=source.kind,
        config=CONFIG.validate_python(source.config),
        has_credentials=source.credentials is not None,
        interval_s=source.interval_s,
        cron=source.cron,
        next_run_at=source.next_run_at,
        last_run_at=source.last_run_at,
        last_status=source.last_status,
        last_error=source.last_error,
        last_job_id=source.last_job_id,
        running=lease is not None and as_utc(lease) > utcnow(),
        created_at=source.created_at,
    )
