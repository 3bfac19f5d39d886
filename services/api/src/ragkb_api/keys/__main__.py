"""`python -m ragkb_api.keys create --name NAME --role admin|client [--grant KB_ID=read|write ...]`

Creates an API key directly in the metadata database named by the api's settings (RAGKB_DATABASE__URL) and
prints it once: how an operator gets a first admin key without the bootstrap key, or recovers access."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pydantic import ValidationError

from ragkb_api.keys.schemas import ApiKeyCreate
from ragkb_api.keys.service import ApiKeyService
from ragkb_api.settings import ApiSettings
from ragkb_core.errors import RagkbError
from ragkb_store.db.engine import build_engine, build_session_factory, migrate_to_head


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    engine = build_engine(ApiSettings().database)
    try:
        migrate_to_head(engine)
        keys = ApiKeyService(build_session_factory(engine), bootstrap_admin_key=None)
        created = keys.create(ApiKeyCreate(name=args.name, role=args.role, grants=_grants(args.grant)))
    except RagkbError as exc:
        print(f"error: {exc.detail}", file=sys.stderr)
        return 1
    except ValidationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    print(f"created {created.role} key {created.name!r} (id {created.id}); it is shown only now:", file=sys.stderr)
    print(created.key)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ragkb_api.keys", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    create = commands.add_parser("create", help="create a key and print it")
    create.add_argument("--name", required=True)
    create.add_argument("--role", choices=["admin", "client"], default="client")
    create.add_argument("--grant", action="append", default=[], metavar="KB_ID=read|write")
    return parser


def _grants(pairs: list[str]) -> dict[str, Any]:
    grants: dict[str, Any] = {}
    for pair in pairs:
        kb_id, _, permission = pair.partition("=")
        grants[kb_id] = permission
    return grants


if __name__ == "__main__":
    sys.exit(main())
