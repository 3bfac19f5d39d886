"""Question sets of a KB: queries with relevance judgements, stored for evaluations and the re-index gate."""

from __future__ import annotations

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ragkb_api.evaluations.beir import (
    JudgedQuestions,
    Question,
    from_beir_files,
    from_json,
    to_qrels_tsv,
    to_queries_jsonl,
)
from ragkb_api.evaluations.schemas import (
    BeirExport,
    QuestionIn,
    QuestionSetCreate,
    QuestionSetDetail,
    QuestionSetOut,
    QuestionSetPatch,
)
from ragkb_api.paging import Page, PageRequest
from ragkb_core.errors import Conflict, InvalidInput, NotFound
from ragkb_core.ids import new_id
from ragkb_core.settings import LimitSettings
from ragkb_store.db.engine import transaction
from ragkb_store.db.models import Judgement, QuestionSet
from ragkb_store.db.models import Question as QuestionRow
from ragkb_store.knowledge_bases import load_kb

# Rows per INSERT statement: well under SQLite's and PostgreSQL's bound-parameter limits.
INSERT_BATCH = 2000


class QuestionSetService:
    def __init__(self, sessions: sessionmaker[Session], limits: LimitSettings) -> None:
        self._sessions = sessions
        self._limits = limits

    def create_from_json(self, kb_id: str, data: QuestionSetCreate) -> QuestionSetOut:
        questions = [Question(query.id, query.text) for query in data.queries]
        judged = from_json(questions, data.qrels, self._limits.max_query_chars)
        return self.create(kb_id, data.name, judged, data.quality_gate)

    def create_from_beir(
        self, kb_id: str, name: str, queries_jsonl: bytes, qrels_tsv: bytes, quality_gate: bool = False
    ) -> QuestionSetOut:
        """A BEIR folder's queries.jsonl and qrels/<split>.tsv: the queries those qrels judge."""
        judged = from_beir_files(queries_jsonl, qrels_tsv, self._limits.max_query_chars)
        return self.create(kb_id, name, judged, quality_gate)

    def create(self, kb_id: str, name: str, judged: JudgedQuestions, quality_gate: bool = False) -> QuestionSetOut:
        set_id = new_id()
        try:
            with transaction(self._sessions) as session:
                load_kb(session, kb_id)
                _ensure_name_free(session, kb_id, name)
                if quality_gate:
                    _clear_gate(session, kb_id)
                session.add(QuestionSet(id=set_id, kb_id=kb_id, name=name, is_quality_gate=quality_gate))
                session.flush()
                _insert_rows(session, set_id, judged)
        except IntegrityError as exc:
            raise Conflict(f"knowledge base {kb_id} already has a question set named {name!r}") from exc
        return self.get_summary(kb_id, set_id)

    def list(self, kb_id: str, page: PageRequest) -> Page[QuestionSetOut]:
        query = select(QuestionSet).where(QuestionSet.kb_id == kb_id).order_by(QuestionSet.created_at, QuestionSet.id)
        with self._sessions() as session:
            load_kb(session, kb_id)
            total = session.scalar(select(func.count()).select_from(query.order_by(None).subquery())) or 0
            sets = session.scalars(query.limit(page.limit).offset(page.offset)).all()
            return Page([_summary(session, question_set) for question_set in sets], total, page)

    def get_summary(self, kb_id: str, set_id: str) -> QuestionSetOut:
        with self._sessions() as session:
            return _summary(session, _load_set(session, kb_id, set_id))

    def get(self, kb_id: str, set_id: str) -> QuestionSetDetail:
        summary = self.get_summary(kb_id, set_id)
        judged = self.load(kb_id, set_id)
        queries = [QuestionIn(id=q.query_id, text=q.text) for q in judged.questions]
        return QuestionSetDetail(**summary.model_dump(), queries=queries, qrels=judged.qrels)

    def export_beir(self, kb_id: str, set_id: str) -> BeirExport:
        summary = self.get_summary(kb_id, set_id)
        judged = self.load(kb_id, set_id)
        return BeirExport(
            name=summary.name,
            queries_jsonl=to_queries_jsonl(judged.questions),
            qrels_tsv=to_qrels_tsv(judged.questions, judged.qrels),
        )

    def load(self, kb_id: str, set_id: str, max_queries: int | None = None) -> JudgedQuestions:
        """The set's questions in their given order (the first `max_queries`) and their judgements."""
        with self._sessions() as session:
            _load_set(session, kb_id, set_id)
            query = select(QuestionRow).where(QuestionRow.set_id == set_id).order_by(QuestionRow.position)
            questions = [Question(row.query_id, row.text) for row in session.scalars(query.limit(max_queries))]
            wanted = {question.query_id for question in questions}
            qrels: dict[str, dict[str, int]] = {query_id: {} for query_id in wanted}
            rows = session.execute(
                select(Judgement.query_id, Judgement.source_id, Judgement.grade).where(Judgement.set_id == set_id)
            )
            for query_id, source_id, grade in rows:
                if query_id in wanted:
                    qrels[query_id][source_id] = grade
        return JudgedQuestions(questions, qrels)

    def update(self, kb_id: str, set_id: str, patch: QuestionSetPatch) -> QuestionSetOut:
        if patch.name is None and patch.quality_gate is None:
            raise InvalidInput("nothing to change: give name or quality_gate")
        try:
            with transaction(self._sessions) as session:
                question_set = _load_set(session, kb_id, set_id)
                if patch.name is not None and patch.name != question_set.name:
                    _ensure_name_free(session, kb_id, patch.name)
                    question_set.name = patch.name
                if patch.quality_gate:
                    _clear_gate(session, kb_id)
                if patch.quality_gate is not None:
                    question_set.is_quality_gate = patch.quality_gate
        except IntegrityError as exc:
            raise Conflict(f"knowledge base {kb_id} already has a question set named {patch.name!r}") from exc
        return self.get_summary(kb_id, set_id)

    def delete(self, kb_id: str, set_id: str) -> None:
        with transaction(self._sessions) as session:
            session.delete(_load_set(session, kb_id, set_id))

    def quality_gate(self, kb_id: str) -> str | None:
        """The id of the set a re-index of this KB is judged by, if it has one."""
        with self._sessions() as session:
            return session.scalars(
                select(QuestionSet.id).where(QuestionSet.kb_id == kb_id, QuestionSet.is_quality_gate.is_(True))
            ).first()


def _insert_rows(session: Session, set_id: str, judged: JudgedQuestions) -> None:
    questions = [
        {"set_id": set_id, "query_id": q.query_id, "position": position, "text": q.text}
        for position, q in enumerate(judged.questions)
    ]
    judgements = [
        {"set_id": set_id, "query_id": query_id, "source_id": source_id, "grade": grade}
        for query_id, docs in judged.qrels.items()
        for source_id, grade in docs.items()
    ]
    for table, rows in ((QuestionRow, questions), (Judgement, judgements)):
        for start in range(0, len(rows), INSERT_BATCH):
            session.execute(insert(table), rows[start : start + INSERT_BATCH])


def _summary(session: Session, question_set: QuestionSet) -> QuestionSetOut:
    count = func.count()
    queries = session.scalar(select(count).select_from(QuestionRow).where(QuestionRow.set_id == question_set.id))
    judgements = session.scalar(select(count).select_from(Judgement).where(Judgement.set_id == question_set.id))
    return QuestionSetOut(
        id=question_set.id,
        knowledge_base_id=question_set.kb_id,
        name=question_set.name,
        quality_gate=question_set.is_quality_gate,
        query_count=queries or 0,
        judgement_count=judgements or 0,
        created_at=question_set.created_at,
    )


def _clear_gate(session: Session, kb_id: str) -> None:
    session.execute(update(QuestionSet).where(QuestionSet.kb_id == kb_id).values(is_quality_gate=False))


def _ensure_name_free(session: Session, kb_id: str, name: str) -> None:
    taken = session.scalar(select(QuestionSet.id).where(QuestionSet.kb_id == kb_id, QuestionSet.name == name))
    if taken is not None:
        raise Conflict(f"knowledge base {kb_id} already has a question set named {name!r}")


def _load_set(session: Session, kb_id: str, set_id: str) -> QuestionSet:
    question_set = session.get(QuestionSet, set_id)
    if question_set is None or question_set.kb_id != kb_id:
        raise NotFound(f"question set {set_id} does not exist in knowledge base {kb_id}")
    return question_set
