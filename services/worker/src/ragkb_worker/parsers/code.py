"""Source code: one section per top-level definition (and per member of a class-like container), so that a
chunk holds one function and its heading path names it.

Python is read with `ast`. The other languages use a line heuristic that relies on how code is laid out,
not on a grammar: a definition starts a line matching its language's rule; indentation tells what encloses
it; a definition inside a function is part of that function. Comments, decorators and annotations just
above a definition belong to its section.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ragkb_core import formats
from ragkb_worker.parsers.model import ParsedDocument, ParseOptions, Section
from ragkb_worker.parsers.text import decode_text

# Longer lines are data (minified code, embedded blobs), never a definition; skipping them also keeps the
# rules' regular expressions fast.
_MAX_DEFINITION_LINE = 400
_TAB_WIDTH = 4
# Statements that look like a call or a signature (`if (x) {`, `return foo(x)`): they never open a definition…
_CONTROL_WORDS = {"if", "elif", "else", "for", "foreach", "while", "do", "switch", "case", "match", "loop", "when"}
_GUARD_WORDS = {"catch", "using", "lock", "synchronized", "unless", "until"}
_OPERATOR_WORDS = {"return", "new", "throw", "delete", "goto", "await", "yield", "typeof", "sizeof", "defined"}
_NOT_FIRST_WORDS = frozenset(_CONTROL_WORDS | _GUARD_WORDS | _OPERATOR_WORDS)
# …and these are never a definition's name (`new` is: Rust's constructors, Ruby's).
_NOT_NAMES = frozenset(_CONTROL_WORDS | _GUARD_WORDS | {"function", "return", "typeof", "sizeof", "defined"})
_C_COMMENTS = ("//", "/*", "*")
# Lines that end a definition's body rather than start new top-level code.
_CLOSERS = ("}", ")", "]", ";", "end", "fi", "esac", "$$", "?>")
_HASH_COMMENTS = ("#",)


@dataclass(frozen=True)
class Rule:
    """A definition line (matched without its indentation); group `name` names the definition."""

    pattern: re.Pattern[str]
    container: bool = False  # its body holds definitions that are sections too: class, impl, namespace
    member: bool = False  # only inside a container: a method, never at the top level


@dataclass(frozen=True)
class Language:
    rules: tuple[Rule, ...]
    comments: tuple[str, ...]  # prefixes of comment lines: they neither open nor close anything
    attached: tuple[str, ...] = ()  # prefixes of lines that belong to the definition below (annotations)
    # Whether top-level code after a definition starts a section of its own. Not in SQL, where a function's
    # body sits at the left margin and the INSERTs after a CREATE TABLE belong with it.
    top_level_code: bool = True


@dataclass(frozen=True)
class Definition:
    line: int  # 0-based index of the first line of its section
    path: tuple[str, ...]


def _rule(pattern: str, *, container: bool = False, member: bool = False) -> Rule:
    return Rule(re.compile(pattern), container, member)


# A signature with optional return type and modifiers before the name, e.g. `public static int add(`, and no
# `;` after it (that would be a declaration or a call).
_TYPED_FUNCTION = r"(?:[\w:*&<>?,~\[\].]+\s+)*[*&]*(?P<name>[A-Za-z_~][\w:~]*)\s*(?:<[^>()]*>)?\s*\([^;]*$"
_JS_MODIFIERS = r"(?:(?:public|private|protected|static|readonly|async|abstract|override|get|set|declare)\s+)*"
_JS = Language(
    rules=(
        _rule(
            r"^(?:export\s+)?(?:default\s+)?(?:declare\s+)?(?:abstract\s+)?class\s+(?P<name>[A-Za-z_$][\w$]*)",
            container=True,
        ),
        _rule(r"^(?:export\s+)?(?:declare\s+)?(?:interface|enum|namespace|module)\s+(?P<name>[A-Za-z_$][\w$.]*)"),
        _rule(r"^(?:export\s+)?(?:default\s+)?(?:async\s+)?function\s*\*?\s*(?P<name>[A-Za-z_$][\w$]*)"),
        _rule(r"^(?:export\s+)?type\s+(?P<name>[A-Za-z_$][\w$]*)\s*(?:<[^>]*>)?\s*="),
        _rule(
            r"^(?:export\s+)?(?:const|let|var)\s+(?P<name>[A-Za-z_$][\w$]*)\s*(?::[^=]+)?=\s*(?:async\s+)?"
            r"(?:function\b|\([^)]*\)\s*(?::[^=]+)?=>|\(|[A-Za-z_$][\w$]*\s*=>)"
        ),
        _rule(rf"^{_JS_MODIFIERS}\*?(?P<name>#?[A-Za-z_$][\w$]*)\s*(?:<[^>]*>)?\s*\([^;]*$", member=True),
        _rule(rf"^{_JS_MODIFIERS}(?P<name>#?[A-Za-z_$][\w$]*)\s*(?::[^=]+)?=\s*(?:async\s+)?\(", member=True),
    ),
    comments=_C_COMMENTS,
    attached=("@",),
)
_JAVA_LIKE_CONTAINER = (
    r"^(?:(?:public|private|protected|internal|static|abstract|final|sealed|non-sealed|partial|readonly|unsafe"
    r"|strictfp|new|file|ref|data|open)\s+)*(?:class|interface|enum|record|struct|@interface|namespace)"
    r"\s+(?P<name>[A-Za-z_][\w.]*)[^;]*$"
)
_JAVA_LIKE = Language(
    rules=(_rule(_JAVA_LIKE_CONTAINER, container=True), _rule(rf"^{_TYPED_FUNCTION}", member=True)),
    comments=_C_COMMENTS,
    attached=("@", "["),
)
_DART = Language(
    rules=(
        _rule(
            r"^(?:(?:abstract|base|final|interface|sealed|mixin)\s+)*(?:class|mixin|extension|enum)\s+"
            r"(?P<name>[A-Za-z_]\w*)",
            container=True,
        ),
        _rule(rf"^{_TYPED_FUNCTION}"),
    ),
    comments=_C_COMMENTS,
    attached=("@",),
)
_GO = Language(
    rules=(
        _rule(r"^func\s+(?:\([^)]*\)\s*)?(?P<name>[A-Za-z_]\w*)"),
        _rule(r"^type\s+(?P<name>[A-Za-z_]\w*)"),
    ),
    comments=_C_COMMENTS,
)
_RUST_VISIBILITY = r"(?:pub(?:\([^)]*\))?\s+)?"
_RUST = Language(
    rules=(
        _rule(r"^(?:unsafe\s+)?impl(?:<[^>]*>)?\s+(?:[\w:<>, ]+?\s+for\s+)?(?P<name>[A-Za-z_][\w:]*)", container=True),
        _rule(rf"^{_RUST_VISIBILITY}(?:unsafe\s+)?(?:trait|mod)\s+(?P<name>[A-Za-z_]\w*)[^;]*$", container=True),
        _rule(
            rf"^{_RUST_VISIBILITY}(?:default\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?"
            r'(?:extern\s+"[^"]*"\s+)?fn\s+(?P<name>[A-Za-z_]\w*)'
        ),
        _rule(rf"^{_RUST_VISIBILITY}(?:struct|enum|union|type)\s+(?P<name>[A-Za-z_]\w*)"),
        _rule(r"^macro_rules!\s*(?P<name>[A-Za-z_]\w*)"),
    ),
    comments=_C_COMMENTS,
    attached=("#[",),
)
_C_FAMILY = Language(
    rules=(
        _rule(
            r"^(?:template\s*<.*>\s*)?(?:class|struct|union|namespace)\s+(?:\w+\s+)*?(?P<name>[A-Za-z_]\w*)"
            r"\s*(?:final\s*)?(?::[^;{]*)?\{?\s*$",
            container=True,
        ),
        _rule(r"^(?:typedef\s+)?enum\s+(?:class\s+)?(?P<name>[A-Za-z_]\w*)"),
        _rule(rf"^(?:template\s*<.*>\s*)?{_TYPED_FUNCTION}"),
    ),
    comments=_C_COMMENTS,
)
_PHP = Language(
    rules=(
        _rule(r"^(?:(?:abstract|final|readonly)\s+)*(?:class|interface|trait|enum)\s+(?P<name>\w+)", container=True),
        _rule(r"^(?:(?:public|private|protected|static|abstract|final)\s+)*function\s+&?(?P<name>\w+)"),
    ),
    comments=(*_C_COMMENTS, "#"),
)
_RUBY = Language(
    rules=(
        _rule(r"^(?:class|module)\s+(?P<name>[A-Z][\w:]*)", container=True),
        _rule(r"^def\s+(?:self\.)?(?P<name>[\w?!=\[\]<>+\-*/%]+)"),
    ),
    comments=_HASH_COMMENTS,
)
_SHELL = Language(
    rules=(
        _rule(r"^function\s+(?P<name>[A-Za-z_][\w:.-]*)"),
        _rule(r"^(?P<name>[A-Za-z_][\w:.-]*)\s*\(\)"),
    ),
    comments=_HASH_COMMENTS,
)
_SQL = Language(
    rules=(
        _rule(
            r"(?i)^(?:create|alter)\s+(?:or\s+replace\s+)?(?:(?:temporary|temp|unique|materialized|global)\s+)*"
            r"(?:table|view|index|function|procedure|trigger|type|schema|sequence)\s+(?:if\s+not\s+exists\s+)?"
            r"(?P<name>[\w.\"`\[\]]+)"
        ),
    ),
    comments=("--", "/*", "*"),
    top_level_code=False,
)
_PYTHON_FALLBACK = Language(
    rules=(
        _rule(r"^class\s+(?P<name>[A-Za-z_]\w*)", container=True),
        _rule(r"^(?:async\s+)?def\s+(?P<name>[A-Za-z_]\w*)"),
    ),
    comments=_HASH_COMMENTS,
    attached=("@",),
)
LANGUAGES: dict[str, Language] = {
    formats.JAVASCRIPT: _JS,
    formats.JSX: _JS,
    formats.TYPESCRIPT: _JS,
    formats.TSX: _JS,
    formats.JAVA: _JAVA_LIKE,
    formats.CSHARP: _JAVA_LIKE,
    formats.DART: _DART,
    formats.GO: _GO,
    formats.RUST: _RUST,
    formats.C: _C_FAMILY,
    formats.CPP: _C_FAMILY,
    formats.PHP: _PHP,
    formats.RUBY: _RUBY,
    formats.SHELL: _SHELL,
    formats.SQL: _SQL,
    formats.PYTHON: _PYTHON_FALLBACK,
}


def code_parser(media_type: str) -> Callable[[bytes, ParseOptions], ParsedDocument]:
    language = LANGUAGES[media_type]

    def parse_code(data: bytes, options: ParseOptions) -> ParsedDocument:
        text = decode_text(data)
        lines = text.split("\n")
        definitions = python_definitions(text) if media_type == formats.PYTHON else None
        if definitions is None:
            definitions = scan_definitions(lines, language)
        definitions = [_with_leading_lines(lines, d, language) for d in definitions]
        return ParsedDocument(text, code_sections(text, lines, definitions))

    return parse_code


def python_definitions(text: str) -> list[Definition] | None:
    """Top-level functions and classes, and the methods of those classes; None when it does not parse."""
    try:
        with warnings.catch_warnings():  # invalid escapes and the like are the author's business, not ours
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    definitions: list[Definition] = []
    after_definition = False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            definitions.append(Definition(_first_line(node), (node.name,)))
        elif after_definition:  # top-level code after a definition is not part of it
            definitions.append(Definition(node.lineno - 1, ()))
        after_definition = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        if isinstance(node, ast.ClassDef):
            definitions += [
                Definition(_first_line(member), (node.name, member.name))
                for member in node.body
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            ]
    return definitions


def _first_line(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> int:
    return min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1


def scan_definitions(lines: Sequence[str], language: Language) -> list[Definition]:
    """Definitions found by the language's rules, nested by indentation (see the module's docstring)."""
    enclosing: list[tuple[int, str, bool]] = []  # (indentation, name, is a container)
    definitions: list[Definition] = []
    after_definition = False
    for number, line in enumerate(lines):
        stripped = line.strip()
        # A brace alone on its line opens the body above it (Allman style): it neither opens nor closes.
        if not stripped or stripped.startswith(language.comments) or stripped == "{":
            continue
        indent = _indentation(line)
        while enclosing and enclosing[-1][0] >= indent:
            enclosing.pop()
        if enclosing and not enclosing[-1][2]:
            continue  # inside a function: a nested definition belongs to it
        found = _match(language, stripped, inside_container=bool(enclosing))
        if found is not None:
            name, container = found
            definitions.append(Definition(number, (*(n for _, n, _ in enclosing), name)))
            enclosing.append((indent, name, container))
            after_definition = True
        elif after_definition and language.top_level_code and not enclosing and not stripped.startswith(_CLOSERS):
            definitions.append(Definition(number, ()))  # top-level code after a definition is not part of it
            after_definition = False
    return definitions


def _match(language: Language, line: str, *, inside_container: bool) -> tuple[str, bool] | None:
    if len(line) > _MAX_DEFINITION_LINE or line.split(maxsplit=1)[0] in _NOT_FIRST_WORDS:
        return None
    for rule in language.rules:
        if rule.member and not inside_container:
            continue
        match = rule.pattern.match(line)
        if match and match["name"] not in _NOT_NAMES:
            return match["name"], rule.container
    return None


def _indentation(line: str) -> int:
    expanded = line.expandtabs(_TAB_WIDTH)
    return len(expanded) - len(expanded.lstrip())


def _with_leading_lines(lines: Sequence[str], definition: Definition, language: Language) -> Definition:
    """Move the start up over the comments and annotations written just above the definition."""
    prefixes = (*language.comments, *language.attached)
    indent = _indentation(lines[definition.line])
    first = definition.line
    while first > 0:
        above = lines[first - 1]
        if not above.strip().startswith(prefixes) or _indentation(above) != indent:
            break
        first -= 1
    return Definition(first, definition.path)


def code_sections(text: str, lines: Sequence[str], definitions: Sequence[Definition]) -> list[Section]:
    """Sections from each definition's first line to the next one's; code before the first stands alone."""
    line_starts = [0]
    for line in lines[:-1]:
        line_starts.append(line_starts[-1] + len(line) + 1)
    cuts: list[tuple[int, tuple[str, ...]]] = [(0, ())]
    for definition in sorted(definitions, key=lambda d: d.line):
        start = line_starts[definition.line]
        if start > cuts[-1][0]:
            cuts.append((start, definition.path))
        else:  # an annotation moved a definition up onto the previous cut (or onto line 0): it names the cut
            cuts[-1] = (cuts[-1][0], definition.path)
    bounds = [*(start for start, _ in cuts[1:]), len(text)]
    sections = [Section(path, start, end, kind="code") for (start, path), end in zip(cuts, bounds, strict=True)]
    return [s for s in sections if text[s.start : s.end].strip()]
