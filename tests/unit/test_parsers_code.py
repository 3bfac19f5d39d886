"""Source code: a section per top-level definition (and per method of a class), named by the definition."""

from __future__ import annotations

import pytest

from ragkb_core import formats
from ragkb_worker.parsing import parse


def outline(media_type: str, source: str) -> list[tuple[str, ...]]:
    document = parse(media_type, source.encode())
    assert all(s.kind == "code" for s in document.sections)
    # Sections tile the code: nothing is lost between them.
    assert "".join(document.text[s.start : s.end] for s in document.sections).strip() == source.strip()
    return [s.heading_path for s in document.sections]


PYTHON = '''"""Tools."""
import os


# Adds two numbers.
@cache
def add(a, b):
    def inner():
        return a
    return a + b


class Cart:
    """A cart."""

    def total(self):
        return 0

    async def pay(self):
        pass


if __name__ == "__main__":
    add(1, 2)
'''


def test_python_is_cut_at_functions_classes_and_methods() -> None:
    assert outline(formats.PYTHON, PYTHON) == [(), ("add",), ("Cart",), ("Cart", "total"), ("Cart", "pay"), ()]


def test_a_python_function_section_starts_at_its_comment_and_decorator() -> None:
    document = parse(formats.PYTHON, PYTHON.encode())
    add = document.sections[1]
    assert document.text[add.start :].startswith("# Adds two numbers.\n@cache\ndef add")


def test_python_that_does_not_parse_falls_back_to_the_line_rules() -> None:
    source = "def ok():\n    return 1\n\ndef broken(:\n    pass\n"
    assert outline(formats.PYTHON, source) == [("ok",), ("broken",)]


@pytest.mark.parametrize(
    ("media_type", "source", "expected"),
    [
        (
            formats.TYPESCRIPT,
            'import x from "y";\n\n/** Adds. */\nexport function add(a: number): number {\n  if (a) {\n'
            "    return a;\n  }\n  return 0;\n}\n\nexport class Cart {\n  private items: string[] = [];\n\n"
            "  add(item: string): void {\n    this.items.push(item);\n  }\n}\n\n"
            "export const total = (c: Cart) => {\n  return 0;\n};\n",
            [(), ("add",), ("Cart",), ("Cart", "add"), ("total",)],
        ),
        (
            formats.JAVASCRIPT,
            "function hello() {\n  return 1;\n}\n\nmodule.exports = { hello };\n",
            [("hello",), ()],
        ),
        (
            formats.JAVA,
            "package x;\n\n@Service\npublic class Billing {\n    private int x;\n\n    @Override\n"
            '    public String toString() {\n        return "";\n    }\n\n'
            "    public static List<String> names(int a) {\n        return null;\n    }\n}\n",
            [(), ("Billing",), ("Billing", "toString"), ("Billing", "names")],
        ),
        (
            formats.CSHARP,
            "using System;\n\nnamespace Shop\n{\n    public class Invoice\n    {\n        [Obsolete]\n"
            "        public decimal Total()\n        {\n            return 0;\n        }\n    }\n}\n",
            [(), ("Shop",), ("Shop", "Invoice"), ("Shop", "Invoice", "Total")],
        ),
        (
            formats.GO,
            "package main\n\n// Server serves.\ntype Server struct {\n\tport int\n}\n\n"
            "func (s *Server) Start() error {\n\treturn nil\n}\n",
            [(), ("Server",), ("Start",)],
        ),
        (
            formats.RUST,
            "use std::io;\n\n#[derive(Debug)]\npub struct Point {\n    x: i32,\n}\n\nimpl Point {\n"
            "    pub fn new() -> Self {\n        Point { x: 0 }\n    }\n}\n",
            [(), ("Point",), ("Point",), ("Point", "new")],
        ),
        (
            formats.C,
            "#include <stdio.h>\n\nstatic int add(int a, int b)\n{\n    return a + b;\n}\n\nint main(void) {\n"
            "    if (add(1, 2)) {\n        return 1;\n    }\n    return 0;\n}\n",
            [(), ("add",), ("main",)],
        ),
        (
            formats.CPP,
            "namespace geo {\nclass Shape {\n  public:\n    double area() const {\n        return 0;\n    }\n};\n}\n",
            # Namespaces are not indented, so their classes read as top-level ones.
            [("geo",), ("Shape",), ("Shape", "area")],
        ),
        (
            formats.RUBY,
            "require 'x'\n\nmodule Billing\n  class Invoice\n    def total\n      1\n    end\n  end\nend\n",
            [(), ("Billing",), ("Billing", "Invoice"), ("Billing", "Invoice", "total")],
        ),
        (
            formats.PHP,
            "<?php\n\nclass Cart {\n    public function add($x) {\n        return 1;\n    }\n}\n\n"
            "function helper() {}\n",
            [(), ("Cart",), ("Cart", "add"), ("helper",)],
        ),
        (
            formats.DART,
            "import 'x.dart';\n\nvoid main() {\n  print(1);\n}\n\n"
            "class Cart {\n  int total() {\n    return 0;\n  }\n}\n",
            [(), ("main",), ("Cart",), ("Cart", "total")],
        ),
        (
            formats.SHELL,
            "#!/bin/sh\nset -e\n\n# Build it.\nbuild() {\n  make\n}\n\nfunction deploy {\n  echo hi\n}\n\nbuild\n",
            [(), ("build",), ("deploy",), ()],
        ),
        (
            formats.SQL,
            "-- Users.\nCREATE TABLE users (\n  id int\n);\n\nCREATE OR REPLACE FUNCTION f() RETURNS int AS $$\n"
            "BEGIN\nRETURN 1;\nEND;\n$$ LANGUAGE plpgsql;\n",
            [("users",), ("f",)],
        ),
    ],
)
def test_definitions_are_found_by_line_rules(media_type: str, source: str, expected: list[tuple[str, ...]]) -> None:
    assert outline(media_type, source) == expected


def test_a_function_nested_in_a_function_stays_in_it() -> None:
    source = "function outer() {\n  function inner() {\n    return 1;\n  }\n  return inner();\n}\n"
    assert outline(formats.JAVASCRIPT, source) == [("outer",)]


def test_a_minified_line_is_not_read_as_a_definition() -> None:
    source = "var a=" + "1+" * 500 + "1;function f(){}\n"
    assert outline(formats.JAVASCRIPT, source) == [()]
