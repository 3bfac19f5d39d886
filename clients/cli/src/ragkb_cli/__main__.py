"""`ragkb`: knowledge bases, folder sync, search, evaluation and tuning against a ragkb server's public API.

Exit codes: 0 success, 1 an operation had failures (a file that did not sync), 2 usage or API errors."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import httpx

from ragkb_cli import __version__
from ragkb_cli.api import ApiClient, ApiError, Json
from ragkb_cli.evaluate import BeirFolder, evaluation_body, metric_lines, upload_corpus
from ragkb_cli.files import ledger_path
from ragkb_cli.output import (
    consistency_lines,
    deletion_line,
    excluded_lines,
    failure_lines,
    kb_table,
    plan_lines,
    repair_lines,
    search_lines,
    summary_line,
)
from ragkb_cli.progress import terminal_progress
from ragkb_cli.sync import SyncOptions, SyncRun
from ragkb_cli.tune import applied_line, tune_lines

DEFAULT_URL = "http://127.0.0.1:8000"
# Where `make run` writes the admin key it generated, relative to the repository it runs in.
ADMIN_KEY_FILE = Path("var/admin.key")
EXIT_OK, EXIT_FAILURES, EXIT_ERROR = 0, 1, 2
SEARCH_MODES = ("hybrid", "semantic", "keyword")
# An evaluation answers when every query has been searched: about 25 ms a query and run on the server.
EVAL_TIMEOUT_S = 3600.0


def main(argv: Sequence[str] | None = None, *, transport: httpx.BaseTransport | None = None) -> int:
    args = build_parser().parse_args(argv)
    api = ApiClient(args.url, resolve_key(args.key), transport=transport)
    try:
        command: Callable[[ApiClient, argparse.Namespace], int] = args.command
        return command(api, args)
    except ApiError as exc:
        print(f"error: {exc.title}: {exc.detail}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    finally:
        api.close()


def resolve_key(explicit: str | None) -> str | None:
    """--key, else RAGKB_API_KEY, else ./var/admin.key (what `make run` generates), else none."""
    key = explicit or os.environ.get("RAGKB_API_KEY")
    if key:
        return key
    try:
        return ADMIN_KEY_FILE.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


# -- commands -----------------------------------------------------------------------------------------------


def kb_create(api: ApiClient, args: argparse.Namespace) -> int:
    print(api.create_kb(args.name)["id"])
    return EXIT_OK


def kb_list(api: ApiClient, args: argparse.Namespace) -> int:
    kbs = api.list_kbs()
    _print_lines([json.dumps(kbs, ensure_ascii=False, indent=2)] if args.json else kb_table(kbs))
    return EXIT_OK


def kb_delete(api: ApiClient, args: argparse.Namespace) -> int:
    kb = api.resolve_kb(args.kb)
    if not args.yes:
        print(
            f"error: deleting {kb['name']} ({kb['id']}) removes its documents and index for good: add --yes",
            file=sys.stderr,
        )
        return EXIT_ERROR
    job = api.delete_kb(str(kb["id"]))
    if args.no_wait:
        print(deletion_line(kb, job))
        return EXIT_OK
    job = api.wait_job(str(job["id"]), args.timeout)
    print(deletion_line(kb, job))
    return EXIT_OK if job["status"] == "succeeded" else EXIT_FAILURES


def kb_check(api: ApiClient, args: argparse.Namespace) -> int:
    """Exit 0 when the KB is consistent (after a repair: when the repair left it so), 1 when not."""
    kb = api.resolve_kb(args.kb)
    if args.repair:
        repair = api.repair_kb(str(kb["id"]))
        _print_lines([json.dumps(repair, ensure_ascii=False, indent=2)] if args.json else repair_lines(kb, repair))
        return EXIT_OK if repair["after"]["consistent"] else EXIT_FAILURES
    report = api.check_kb(str(kb["id"]))
    _print_lines([json.dumps(report, ensure_ascii=False, indent=2)] if args.json else consistency_lines(kb, report))
    return EXIT_OK if report["consistent"] else EXIT_FAILURES


def kb_backup(api: ApiClient, args: argparse.Namespace) -> int:
    kb = api.resolve_kb(args.kb)
    target = Path(args.output or f"{kb['name']}.ragkb.tar.gz")
    api.backup_kb(str(kb["id"]), target, args.timeout)
    print(f"{kb['name']} ({kb['id']}) backed up to {target} ({target.stat().st_size} bytes)")
    return EXIT_OK


def kb_restore(api: ApiClient, args: argparse.Namespace) -> int:
    archive = Path(args.archive)
    if not archive.is_file():
        print(f"error: not a file: {args.archive}", file=sys.stderr)
        return EXIT_ERROR
    restored = api.restore_kb(archive, args.name, args.timeout)
    kb = restored["knowledge_base"]
    print(
        f"restored {kb['name']} ({kb['id']}): {restored['documents']} documents, {restored['points']} points, "
        f"{restored['queued']} queued to be built again"
    )
    return EXIT_OK


def search(api: ApiClient, args: argparse.Namespace) -> int:
    kb_ids = [str(api.resolve_kb(name)["id"]) for name in args.kb]
    answer = api.search(args.query, kb_ids, args.mode, args.top_k)
    _print_lines([json.dumps(answer, ensure_ascii=False, indent=2)] if args.json else search_lines(answer))
    return EXIT_OK


def sync(api: ApiClient, args: argparse.Namespace) -> int:
    root = Path(args.dir)
    if not root.is_dir():
        print(f"error: not a folder: {args.dir}", file=sys.stderr)
        return EXIT_ERROR
    kb_id = str(api.resolve_kb(args.kb)["id"])
    options = SyncOptions(dry_run=args.dry_run, concurrency=args.concurrency, timeout_s=args.timeout)
    progress = terminal_progress(enabled=not args.quiet)
    ledger = ledger_path(api.url, kb_id, root)
    report = SyncRun(api, kb_id, root, ledger=ledger, options=options, progress=progress).run()
    if args.dry_run:
        _print_lines(plan_lines(report.plan))
    else:
        if not args.quiet:
            _print_lines(excluded_lines(report.plan), sys.stderr)
        print(summary_line(report))
    _print_lines(failure_lines(report.failures), sys.stderr)
    return EXIT_FAILURES if report.failed else EXIT_OK


def eval_import(api: ApiClient, args: argparse.Namespace) -> int:
    folder = BeirFolder(Path(args.dir))
    missing = folder.missing(args.split, args.with_corpus)
    if missing:
        print(f"error: not a BEIR folder, missing: {', '.join(str(path) for path in missing)}", file=sys.stderr)
        return EXIT_ERROR
    kb_id = str(api.resolve_kb(args.kb)["id"])
    failed = 0
    if args.with_corpus:
        with folder.corpus.open(encoding="utf-8") as corpus:
            total = sum(1 for line in corpus if line.strip())
        bar = terminal_progress(enabled=not args.quiet)(total, "uploading corpus")
        try:
            report = upload_corpus(api, kb_id, folder.corpus, args.concurrency, on_done=bar.advance)
        finally:
            bar.close()
        print(f"corpus: uploaded {report.uploaded}, failed {len(report.failures)}")
        _print_lines([f"failed {sid}: {message}" for sid, message in sorted(report.failures.items())], sys.stderr)
        failed = len(report.failures)
    name = args.name or f"{folder.root.resolve().name}-{args.split}"
    created = api.create_question_set(kb_id, name, folder.queries.read_bytes(), folder.qrels(args.split).read_bytes())
    print(
        f"question set {created['name']} ({created['id']}): {created['query_count']} queries, "
        f"{created['judgement_count']} judgements"
    )
    return EXIT_FAILURES if failed else EXIT_OK


def eval_run(api: ApiClient, args: argparse.Namespace) -> int:
    kb_id = str(api.resolve_kb(args.kb)["id"])
    set_id = str(api.resolve_question_set(kb_id, args.set)["id"])
    body = evaluation_body(
        set_id,
        mode=args.mode,
        settings=args.settings,
        compare_mode=args.compare_mode,
        compare_settings=args.compare,
        max_queries=args.max_queries,
        depth=args.depth,
    )
    result = api.evaluate(kb_id, body, timeout_s=args.timeout)
    _print_lines([json.dumps(result, ensure_ascii=False, indent=2)] if args.json else metric_lines(result))
    return EXIT_OK


def tune(api: ApiClient, args: argparse.Namespace) -> int:
    """Exit 0 when the tune succeeded (and, with --apply, its recommendation was applied or there was none), 1
    when the job failed or did not end in time."""
    kb = api.resolve_kb(args.kb)
    kb_id = str(kb["id"])
    set_id = str(api.resolve_question_set(kb_id, args.question_set)["id"])
    body: Json = {"question_set_id": set_id, "folds": args.folds, "seed": args.seed}
    job = api.wait_job(str(api.start_tune(kb_id, body)["id"]), args.timeout)
    if job["status"] != "succeeded":
        errors = "; ".join(str(error["message"]) for error in job["errors"]) or "no reason recorded"
        print(f"error: tune job {job['id']} is {job['status']}: {errors}", file=sys.stderr)
        return EXIT_FAILURES
    result = api.tune_result(kb_id, str(job["id"]))["result"]
    _print_lines([json.dumps(result, ensure_ascii=False, indent=2)] if args.json else tune_lines(kb, result))
    if args.apply and result["changes"]:
        print(applied_line(api.apply_tune(kb_id, str(job["id"]))))
    return EXIT_OK


def _print_lines(lines: list[str], stream: TextIO | None = None) -> None:
    for line in lines:
        print(line, file=stream or sys.stdout)


# -- arguments ---------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragkb", description="ragkb command-line client", parents=[_connection()])
    parser.add_argument("--version", action="version", version=f"ragkb-cli {__version__}")
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    _add_kb(commands)
    _add_sync(commands)
    _add_search(commands)
    _add_eval(commands)
    _add_tune(commands)
    return parser


def _connection(suppress: bool = False) -> argparse.ArgumentParser:
    """--url and --key, accepted before and after the command (after it, only when given: no default there)."""
    parent = argparse.ArgumentParser(add_help=False)
    url = os.environ.get("RAGKB_URL", DEFAULT_URL)
    url_default = argparse.SUPPRESS if suppress else url
    key_default = argparse.SUPPRESS if suppress else None
    parent.add_argument("--url", default=url_default, help=f"server URL (env RAGKB_URL; now {url})")
    parent.add_argument(
        "--key",
        default=key_default,
        help="API key (env RAGKB_API_KEY; else ./var/admin.key); one that begins with - as --key=KEY",
    )
    return parent


def _add_kb(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    kb = commands.add_parser("kb", help="create, list or delete knowledge bases")
    actions = kb.add_subparsers(required=True, metavar="ACTION")
    create = actions.add_parser("create", help="create a KB and print its id", parents=[_connection(True)])
    create.add_argument("name")
    create.set_defaults(command=kb_create)
    listing = actions.add_parser("list", help="the KBs with their document counts", parents=[_connection(True)])
    listing.add_argument("--json", action="store_true", help="print the raw JSON")
    listing.set_defaults(command=kb_list)
    deleting = actions.add_parser(
        "delete", help="delete a KB: its documents, index and stored originals", parents=[_connection(True)]
    )
    deleting.add_argument("kb", metavar="KB", help="KB name or id")
    deleting.add_argument("--yes", action="store_true", help="confirm: the deletion cannot be undone")
    deleting.add_argument("--no-wait", action="store_true", help="print the job and return; do not wait for it")
    deleting.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds to wait for the deletion to finish (default 3600)"
    )
    deleting.set_defaults(command=kb_delete)
    checking = actions.add_parser(
        "check", help="check that a KB's index holds what its documents say", parents=[_connection(True)]
    )
    checking.add_argument("kb", metavar="KB", help="KB name or id")
    checking.add_argument("--repair", action="store_true", help="re-queue missing documents, delete orphan points")
    checking.add_argument("--json", action="store_true", help="print the raw JSON")
    checking.set_defaults(command=kb_check)
    backing_up = actions.add_parser(
        "backup", help="download a KB's backup archive (.tar.gz)", parents=[_connection(True)]
    )
    backing_up.add_argument("kb", metavar="KB", help="KB name or id")
    backing_up.add_argument("--output", "-o", help="the archive's path (default NAME.ragkb.tar.gz)")
    backing_up.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait (default 3600)")
    backing_up.set_defaults(command=kb_backup)
    restoring = actions.add_parser("restore", help="restore a backup archive as a new KB", parents=[_connection(True)])
    restoring.add_argument("archive", metavar="ARCHIVE", help="a file from `ragkb kb backup`")
    restoring.add_argument("--name", help="the new KB's name (default: the backed-up KB's)")
    restoring.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait (default 3600)")
    restoring.set_defaults(command=kb_restore)


def _add_sync(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sync_parser = commands.add_parser(
        "sync", help="make a KB hold exactly the files of a folder", parents=[_connection(True)]
    )
    sync_parser.add_argument("dir", metavar="DIR")
    sync_parser.add_argument("--kb", required=True, help="KB name or id")
    sync_parser.add_argument("--dry-run", action="store_true", help="print the plan; change nothing")
    sync_parser.add_argument("--concurrency", type=_positive_int, default=4, help="parallel uploads (default 4)")
    sync_parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    sync_parser.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds to wait for the server to finish (default 3600)"
    )
    sync_parser.set_defaults(command=sync)


def _add_search(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    search_parser = commands.add_parser("search", help="search one or more KBs", parents=[_connection(True)])
    search_parser.add_argument("query")
    search_parser.add_argument("--kb", action="append", required=True, help="KB name or id (repeatable)")
    search_parser.add_argument("--mode", choices=SEARCH_MODES, help="default: each KB's own")
    search_parser.add_argument("--top-k", type=_positive_int, help="passages to return")
    search_parser.add_argument("--json", action="store_true", help="print the raw JSON")
    search_parser.set_defaults(command=search)


def _add_eval(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    evaluation = commands.add_parser("eval", help="question sets and retrieval evaluations")
    actions = evaluation.add_subparsers(required=True, metavar="ACTION")
    importing = actions.add_parser(
        "import", help="save a BEIR folder's queries and qrels as a question set", parents=[_connection(True)]
    )
    importing.add_argument("dir", metavar="DIR", help="a BEIR folder: queries.jsonl, qrels/<split>.tsv, corpus.jsonl")
    importing.add_argument("--kb", required=True, help="KB name or id")
    importing.add_argument("--split", default="test", help="which qrels/<split>.tsv (default test)")
    importing.add_argument("--name", help="the set's name (default <folder>-<split>)")
    importing.add_argument("--with-corpus", action="store_true", help="also upload corpus.jsonl as documents")
    importing.add_argument("--concurrency", type=_positive_int, default=4, help="parallel uploads (default 4)")
    importing.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    importing.set_defaults(command=eval_import)
    running = actions.add_parser("run", help="evaluate a KB on a question set", parents=[_connection(True)])
    running.add_argument("--kb", required=True, help="KB name or id")
    running.add_argument("--set", required=True, help="question set name or id")
    running.add_argument("--mode", choices=SEARCH_MODES, help="default: the KB's own")
    running.add_argument("--settings", type=_json_object, default={}, help="retrieval overrides (JSON object)")
    running.add_argument("--compare", type=_json_object, help="also run with these overrides and compare (JSON)")
    running.add_argument("--compare-mode", choices=SEARCH_MODES, help="the comparison run's mode")
    running.add_argument("--max-queries", type=_positive_int, help="only the set's first N queries")
    running.add_argument("--depth", type=_positive_int, default=100, help="passages per search (default 100)")
    running.add_argument("--timeout", type=float, default=EVAL_TIMEOUT_S, help="seconds to wait for the answer")
    running.add_argument("--json", action="store_true", help="print the raw JSON (per query too)")
    running.set_defaults(command=eval_run)


def _add_tune(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tuning = commands.add_parser(
        "tune",
        help="search a KB's fusion settings on a question set by cross-validation (admin key)",
        parents=[_connection(True)],
    )
    tuning.add_argument("kb", metavar="KB", help="KB name or id")
    tuning.add_argument("--question-set", required=True, help="question set name or id")
    tuning.add_argument("--folds", type=_positive_int, default=5, help="cross-validation folds (default 5)")
    tuning.add_argument("--seed", type=int, default=21, help="seeds the folds and the bootstrap (default 21)")
    tuning.add_argument("--apply", action="store_true", help="apply the recommendation as a new settings version")
    tuning.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the job (default 3600)")
    tuning.add_argument("--json", action="store_true", help="print the raw JSON result")
    tuning.set_defaults(command=tune)


def _json_object(value: str) -> Json:
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return parsed


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return number


if __name__ == "__main__":
    sys.exit(main())
