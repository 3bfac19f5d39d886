"""Text-bearing formats parsed without any third-party library: plain text, Markdown, HTML, CSV/TSV,
JSON, YAML, XML; and the Japanese regulation structure shared by txt, md, pdf and docx."""

from __future__ import annotations

import pytest

from ragkb_core import formats
from ragkb_worker.parsers.model import Section
from ragkb_worker.parsers.regulations import split_regulations
from ragkb_worker.parsing import ParsedDocument, parse

REGULATION = """就業規則

第1章 総則

（目的）
第1条 この規則は、従業員の就業に関する事項を定める。

第2条（定義）
この規則で従業員とは、会社と雇用契約を結んだ者をいう。
第5条の規定により、会社は労働条件を明示する。

第2章 勤務
第1節 勤務時間
第十二条 始業時刻は午前9時とする。
第１３条　終業時刻は午後6時とする。
第13条の2 休憩は1時間とする。
"""


def spans(document: ParsedDocument) -> list[tuple[tuple[str, ...], str]]:
    return [(s.heading_path, document.text[s.start : s.end].strip()) for s in document.sections]


def test_a_regulation_in_plain_text_has_one_section_per_article() -> None:
    document = parse(formats.PLAIN_TEXT, REGULATION.encode())
    assert spans(document)[1:] == [
        (("第1章 総則",), "第1章 総則"),
        (("第1章 総則", "第1条（目的）"), "（目的）\n第1条 この規則は、従業員の就業に関する事項を定める。"),
        (
            ("第1章 総則", "第2条（定義）"),
            "第2条（定義）\nこの規則で従業員とは、会社と雇用契約を結んだ者をいう。\n第5条の規定により、会社は労働条件を明示する。",
        ),
        (("第2章 勤務",), "第2章 勤務"),
        (("第2章 勤務", "第1節 勤務時間"), "第1節 勤務時間"),
        (("第2章 勤務", "第1節 勤務時間", "第十二条"), "第十二条 始業時刻は午前9時とする。"),
        (("第2章 勤務", "第1節 勤務時間", "第１３条"), "第１３条　終業時刻は午後6時とする。"),
        (("第2章 勤務", "第1節 勤務時間", "第13条の2"), "第13条の2 休憩は1時間とする。"),
    ]
    assert spans(document)[0] == ((), "就業規則")


def test_a_reference_to_an_article_inside_a_sentence_opens_no_section() -> None:
    text = "第1条 会社は、次の事項を定める。\n第5条の規定にかかわらず、休日とする。\n第2条 以上。\n"
    document = parse(formats.PLAIN_TEXT, text.encode())
    assert [path[-1] for path, _ in spans(document)] == ["第1条", "第2条"]


def test_a_single_article_mention_is_not_a_regulation() -> None:
    text = "メモ\n第3条 を読んでおくこと。\n"
    assert spans(parse(formats.PLAIN_TEXT, text.encode())) == [((), text.strip())]


def test_flowing_pages_keep_the_open_article_across_a_page_break() -> None:
    text = "第1条 始まり\n\n続き\n第2条 次\n"
    page_break = text.index("続き")
    pages = [Section((), 0, page_break, page=1), Section((), page_break, len(text), page=2)]
    result = split_regulations(text, pages, flowing=True)
    assert [(s.heading_path, s.page) for s in result] == [(("第1条",), 1), (("第1条",), 2), (("第2条",), 2)]


def test_markdown_regulation_articles_split_under_their_headings() -> None:
    text = "# 規程\n\n## 第1章 総則\n\n第1条 目的を定める。\n\n第2条 範囲を定める。\n"
    document = parse(formats.MARKDOWN, text.encode())
    assert spans(document) == [
        (("規程", "第1章 総則", "第1条"), "第1条 目的を定める。"),
        (("規程", "第1章 総則", "第2条"), "第2条 範囲を定める。"),
    ]


def test_markdown_tables_are_sections_with_their_header() -> None:
    text = "# Plans\n\nIntro line.\n\n| Plan | Days |\n|------|-----:|\n| Basic | 10 |\n| Premium | 20 |\n\nAfter.\n"
    document = parse(formats.MARKDOWN, text.encode())
    assert [(s.heading_path, s.kind, s.header) for s in document.sections] == [
        (("Plans",), "prose", None),
        (("Plans",), "table", "| Plan | Days |\n|------|-----:|"),
        (("Plans",), "prose", None),
    ]
    table = document.sections[1]
    assert document.text[table.start : table.end].rstrip().endswith("| Premium | 20 |")


def test_a_horizontal_rule_is_not_a_table() -> None:
    document = parse(formats.MARKDOWN, b"# A\n\nx | y\n\n---\n\nend\n")
    assert all(s.kind == "prose" for s in document.sections)


HTML = b"""<!doctype html><html><head><title>ignored</title><style>p {color: red}</style></head>
<body><nav>Home</nav><h1>Guide</h1><p>Intro
  text &amp; more</p>
<h2>Install</h2><p>Run<br>it</p><script>var hidden = 1;</script>
<table><tr><th>OS</th><th>Command</th></tr><tr><td>Linux</td><td>apt install ragkb</td></tr></table>
<h2>Use</h2><ul><li>one</li><li>two</li></ul><pre>line 1
  line 2</pre></body></html>"""


def test_html_headings_give_the_heading_path_and_tables_their_header() -> None:
    document = parse(formats.HTML, HTML)
    # The <nav> is page furniture: left out (tests/integration/test_parsers_new_formats.py has a whole page).
    assert [(s.heading_path, s.kind, document.text[s.start : s.end]) for s in document.sections] == [
        (("Guide",), "prose", "Intro text & more"),
        (("Guide", "Install"), "prose", "Run\nit"),
        (("Guide", "Install"), "table", "OS | Command\nLinux | apt install ragkb"),
        (("Guide", "Use"), "prose", "one\n\ntwo\n\nline 1\n  line 2"),
    ]
    assert document.sections[2].header == "OS | Command"
    assert "hidden" not in document.text and "ignored" not in document.text


def test_csv_is_one_table_whose_header_is_the_first_record() -> None:
    text = 'name,"note\nwith break",days\nAiko,"x",12\nBen,y,15\n'
    document = parse(formats.CSV, text.encode())
    assert document.text == text
    (table,) = document.sections
    assert (table.kind, table.header) == ("table", 'name,"note\nwith break",days')


def test_tsv_keeps_its_tabs() -> None:
    document = parse(formats.TSV, b"a\tb\n1\t2\n")
    assert document.sections[0].header == "a\tb"


def test_json_and_yaml_get_a_section_per_top_level_key() -> None:
    json_doc = parse(formats.JSON, b'{\n  "name": "ragkb",\n  "deps": {\n    "a": 1\n  }\n}\n')
    assert [s.heading_path for s in json_doc.sections] == [(), ("name",), ("deps",)]
    yaml_doc = parse(formats.YAML, b"# settings\nname: ragkb\nservices:\n  api:\n    port: 8000\n")
    assert [s.heading_path for s in yaml_doc.sections] == [(), ("name",), ("services",)]
    assert "port: 8000" in spans(yaml_doc)[2][1]


def test_xml_is_kept_as_it_is() -> None:
    data = b'<?xml version="1.0"?>\n<policy><rule id="1">Expenses within 30 days</rule></policy>\n'
    document = parse(formats.XML, data)
    assert document.text == data.decode()
    assert len(document.sections) == 1


def test_crlf_line_breaks_become_newlines() -> None:
    assert parse(formats.PLAIN_TEXT, b"a\r\nb\rc").text == "a\nb\nc"


@pytest.mark.parametrize("media_type", [formats.HTML, formats.MARKDOWN, formats.JSON])
def test_a_document_with_no_text_fails(media_type: str) -> None:
    from ragkb_core.errors import ParseFailed

    with pytest.raises(ParseFailed, match="no text"):
        parse(media_type, b"  \n ")
