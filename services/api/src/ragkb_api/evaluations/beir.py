"""Question sets in BEIR's format: `queries.jsonl` (one `{"_id", "text"}` object a line) and a qrels file
(`query-id<TAB>corpus-id<TAB>score`, header optional; TREC's four columns `qid 0 docid grade` also read).
Pure parsing and checking, no I/O: every refusal is an `InvalidInput` (422) naming the file and line."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from ragkb_core.errors import InvalidInput
from ragkb_core.metrics import JudgedQuestions, Question
from ragkb_http.bodies import NUL

__all__ = ["JudgedQuestions", "Question"]  # re-exported: the api's modules read question sets from here

MAX_QUESTIONS = 20_000
MAX_JUDGEMENTS = 500_000
MAX_QUERY_ID_CHARS = 200
MAX_SOURCE_ID_CHARS = 1024
MAX_GRADE = 10
QUERIES_FILE = "queries.jsonl"
QRELS_FILE = "qrels.tsv"
QRELS_HEADER = "query-id\tcorpus-id\tscore"


def parse_queries_jsonl(data: bytes) -> list[tuple[int, Question]]:
    """(line number, question) per non-blank line."""
    parsed = []
    for number, line in enumerate(_lines(data, QUERIES_FILE), start=1):
        if line.strip():
            parsed.append((number, _query_line(line, number)))
    return parsed


def parse_qrels(data: bytes) -> list[tuple[int, str, str, int]]:
    """(line number, query id, source id, grade) per judgement line; a first line that is a header is skipped."""
    judgements = []
    for number, line in enumerate(_lines(data, QRELS_FILE), start=1):
        if not line.strip() or (number == 1 and _is_header(line)):
            continue
        judgements.append((number, *_qrels_line(line, number)))
    return judgements


def from_beir_files(queries_data: bytes, qrels_data: bytes, max_query_chars: int) -> JudgedQuestions:
    """The judged questions of a BEIR folder's files. queries.jsonl usually holds every split's queries:
    only those the qrels judge are kept, in queries.jsonl's order; a judged query missing from it is refused."""
    queries = parse_queries_jsonl(queries_data)
    _refuse_repeated_ids(queries)
    known = {question.query_id for _, question in queries}
    qrels: dict[str, dict[str, int]] = {}
    for number, query_id, source_id, grade in parse_qrels(qrels_data):
        if query_id not in known:
            raise _bad(QRELS_FILE, number, f"query {query_id!r} is not in {QUERIES_FILE}")
        qrels.setdefault(query_id, {})[source_id] = grade
    judged = [(number, question) for number, question in queries if question.query_id in qrels]
    _check_questions(judged, max_query_chars)
    return _checked(JudgedQuestions([question for _, question in judged], qrels))


def from_json(
    questions: Sequence[Question], qrels: Mapping[str, Mapping[str, int]], max_query_chars: int
) -> JudgedQuestions:
    """The JSON form: every query must carry at least one judgement, every judgement a given query."""
    numbered = list(enumerate(questions))
    _refuse_repeated_ids(numbered, where="queries")
    _check_questions(numbered, max_query_chars, where="queries")
    given = {question.query_id for question in questions}
    unknown = sorted(set(qrels) - given)
    if unknown:
        raise InvalidInput(f"qrels judge queries that are not in queries: {', '.join(unknown[:10])}")
    unjudged = [question.query_id for question in questions if not qrels.get(question.query_id)]
    if unjudged:
        raise InvalidInput(f"queries without any judgement in qrels: {', '.join(unjudged[:10])}")
    for query_id, docs in qrels.items():
        for source_id, grade in docs.items():
            _check_judgement(source_id, grade, f"qrels[{query_id!r}][{source_id!r}]")
    return _checked(JudgedQuestions(list(questions), {query_id: dict(docs) for query_id, docs in qrels.items()}))


def to_queries_jsonl(questions: Sequence[Question]) -> str:
    return "".join(json.dumps({"_id": q.query_id, "text": q.text}, ensure_ascii=False) + "\n" for q in questions)


def to_qrels_tsv(questions: Sequence[Question], qrels: Mapping[str, Mapping[str, int]]) -> str:
    rows = [QRELS_HEADER]
    rows += [f"{q.query_id}\t{source_id}\t{grade}" for q in questions for source_id, grade in qrels[q.query_id].items()]
    return "\n".join(rows) + "\n"


def _lines(data: bytes, file: str) -> list[str]:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise _bad(file, line, "not UTF-8") from exc
    if NUL in text:  # ids and queries are stored as text, which PostgreSQL refuses to hold a NUL in
        raise _bad(file, text[: text.index(NUL)].count("\n") + 1, "holds a NUL character")
    return text.splitlines()


def _query_line(line: str, number: int) -> Question:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise _bad(QUERIES_FILE, number, f"not a JSON object ({exc.msg})") from exc
    except RecursionError as exc:  # `[[[[…` past the decoder's depth: malformed like any other line
        raise _bad(QUERIES_FILE, number, "not a JSON object (nested too deeply)") from exc
    if not isinstance(record, dict):
        raise _bad(QUERIES_FILE, number, "not a JSON object")
    query_id, text = record.get("_id", record.get("id")), record.get("text")
    if not isinstance(query_id, str | int) or isinstance(query_id, bool) or not str(query_id).strip():
        raise _bad(QUERIES_FILE, number, "needs an `_id` (a non-empty string)")
    if not isinstance(text, str):
        raise _bad(QUERIES_FILE, number, "needs a `text` string")
    if NUL in text or NUL in str(query_id):  # escaped as \u0000: the file's own text had none
        raise _bad(QUERIES_FILE, number, "holds a NUL character")
    return Question(str(query_id), text)


def _is_header(line: str) -> bool:
    fields = line.split()
    return len(fields) >= 3 and not _is_int(fields[-1])


def _qrels_line(line: str, number: int) -> tuple[str, str, int]:
    fields = line.rstrip("\r\n").split("\t") if "\t" in line else line.split()
    if len(fields) == 4:  # TREC: qid iteration docid grade
        fields = [fields[0], fields[2], fields[3]]
    if len(fields) != 3:
        raise _bad(QRELS_FILE, number, "needs 3 tab-separated columns: query-id, corpus-id, score")
    query_id, source_id, grade = (field.strip() for field in fields)
    if not query_id or not source_id:
        raise _bad(QRELS_FILE, number, "query-id and corpus-id must not be empty")
    if not _is_int(grade):
        raise _bad(QRELS_FILE, number, f"score must be an integer, not {grade!r}")
    try:
        _check_judgement(source_id, int(grade), "the judgement")
    except InvalidInput as exc:
        raise _bad(QRELS_FILE, number, exc.detail) from exc
    if len(query_id) > MAX_QUERY_ID_CHARS:
        raise _bad(QRELS_FILE, number, f"query-id longer than {MAX_QUERY_ID_CHARS} characters")
    return query_id, source_id, int(grade)


def _check_judgement(source_id: str, grade: int, what: str) -> None:
    if not source_id or len(source_id) > MAX_SOURCE_ID_CHARS:
        raise InvalidInput(f"{what}: corpus-id must have 1 to {MAX_SOURCE_ID_CHARS} characters")
    if not 0 <= grade <= MAX_GRADE:
        raise InvalidInput(f"{what}: score must be between 0 and {MAX_GRADE}, not {grade}")


def _check_questions(numbered: Sequence[tuple[int, Question]], max_query_chars: int, where: str = "") -> None:
    for number, question in numbered:
        place = f"{where}[{number}]" if where else f"{QUERIES_FILE} line {number}"
        if len(question.query_id) > MAX_QUERY_ID_CHARS:
            raise InvalidInput(f"{place}: the id is longer than {MAX_QUERY_ID_CHARS} characters", line=number)
        if not question.text.strip():
            raise InvalidInput(f"{place}: the text is blank", line=number)
        if len(question.text) > max_query_chars:
            raise InvalidInput(f"{place}: the text is longer than {max_query_chars} characters", line=number)


def _refuse_repeated_ids(numbered: Sequence[tuple[int, Question]], where: str = "") -> None:
    seen: set[str] = set()
    for number, question in numbered:
        if question.query_id in seen:
            place = f"{where}[{number}]" if where else f"{QUERIES_FILE} line {number}"
            raise InvalidInput(f"{place}: query id {question.query_id!r} appears twice", line=number)
        seen.add(question.query_id)


def _checked(judged: JudgedQuestions) -> JudgedQuestions:
    if not judged.questions:
        raise InvalidInput("the question set has no judged queries")
    if len(judged.questions) > MAX_QUESTIONS:
        raise InvalidInput(f"a question set holds at most {MAX_QUESTIONS} queries, not {len(judged.questions)}")
    judgements = sum(len(docs) for docs in judged.qrels.values())
    if judgements > MAX_JUDGEMENTS:
        raise InvalidInput(f"a question set holds at most {MAX_JUDGEMENTS} judgements, not {judgements}")
    return judged


def _is_int(text: str) -> bool:
    return text.strip().lstrip("-").isdigit()


def _bad(file: str, line: int, message: str) -> InvalidInput:
    return InvalidInput(f"{file} line {line}: {message}", file=file, line=line)
