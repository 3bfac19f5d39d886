"""The admin console in a real browser (Debian's Chromium driven by Playwright) on the real stack: a whole
admin day, hostile content, CSRF, the session cookie, and an accessibility check (axe-core) of every page.
The tests take the README's screenshots: into the folder RAGKB_SCREENSHOTS names (`RAGKB_SCREENSHOTS=docs/screenshots`
refreshes the README's), else into the test's temporary folder, so that a test run leaves the checkout as it was."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import axe_playwright_python
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, expect, sync_playwright

from tests.e2e.conftest import REPO, RunningRagkb

pytestmark = pytest.mark.e2e

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
AXE_SCRIPT = Path(axe_playwright_python.__file__).with_name("axe.min.js").read_text(encoding="utf-8")
BLOCKING_IMPACTS = {"serious", "critical"}
LIVE_TIMEOUT_MS = 180_000
VIEWPORT = {"width": 1360, "height": 860}
BROKEN_PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\nthis file stops here"
RULES_JA = """# 就業規則

## 第20条（年次有給休暇）

6か月継続勤務し、全労働日の8割以上出勤した社員には、10日の年次有給休暇を与える。

## 第21条（休職）

業務外の傷病により欠勤が3か月を超えたときは、休職を命じることがある。
"""
TRAVEL_EN = """# Travel policy

## Expenses

Submit an expense claim within 30 days of the trip. Receipts are required for anything above 50 EUR.

## Booking

Book trains in second class and flights in economy.
"""


# The browser lives as long as this module's tests, not the session: Playwright's sync API keeps an asyncio
# loop running in the main thread while it is started, and later tests (the MCP client's) run loops of their own.
@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as started:
        yield started


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    # Debian's chromium (make test installs it): Playwright's own browser download is not reachable here.
    assert CHROMIUM.exists(), "the browser tests need Debian's chromium: apt-get install -y chromium (make test does)"
    launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS)
    yield launched
    launched.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    opened = browser.new_context(viewport=VIEWPORT, locale="en-US")
    yield opened
    opened.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    return context.new_page()


@pytest.fixture
def admin_page(page: Page, ragkb: RunningRagkb) -> Page:
    sign_in(page, ragkb, ragkb.env["RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY"])
    return page


@pytest.fixture
def page_errors(page: Page) -> Iterator[list[str]]:
    """Script errors and CSP violations the page reports: a console that works needs neither."""
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on(
        "console", lambda message: errors.append(message.text) if "Content Security Policy" in message.text else None
    )
    page.on("dialog", lambda dialog: errors.append(f"unexpected dialog: {dialog.message}"))
    yield errors
    assert errors == []


# -- helpers -------------------------------------------------------------------------------------------


def console_origin(ragkb: RunningRagkb) -> str:
    return f"http://127.0.0.1:{ragkb.env['RAGKB_API__PORT']}"


def sign_in(page: Page, ragkb: RunningRagkb, key: str) -> None:
    page.goto(console_origin(ragkb) + "/console")
    page.wait_for_url("**/console/signin**")
    page.get_by_label(re.compile("API key|API キー")).fill(key)
    page.get_by_role("button", name=re.compile("Sign in|サインイン")).click()
    page.wait_for_url("**/console/kbs")
    expect(page.locator("main h1")).to_have_count(1)


def go(page: Page, ragkb: RunningRagkb, path: str) -> None:
    page.goto(console_origin(ragkb) + "/console" + path)
    expect(page.locator("main[aria-busy]")).to_have_count(0)


def assert_accessible(page: Page, name: str) -> None:
    """axe-core on the page as it is: no serious or critical violation."""
    page.evaluate(AXE_SCRIPT)
    result = page.evaluate("() => axe.run(document, {resultTypes: ['violations']})")
    blocking = [
        f"{violation['id']} ({violation['impact']}): {[node['target'] for node in violation['nodes']][:3]}"
        for violation in result["violations"]
        if violation["impact"] in BLOCKING_IMPACTS
    ]
    assert blocking == [], f"{name}: {blocking}"


def screenshot(page: Page, name: str) -> None:
    # Toasts come and go; the pictures show the page.
    page.evaluate("() => document.getElementById('toasts').replaceChildren()")
    folder = screenshots_folder()
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def screenshots_folder() -> Path:
    chosen = os.environ.get("RAGKB_SCREENSHOTS")
    return (REPO / chosen) if chosen else Path(tempfile.gettempdir()) / "ragkb-console-screenshots"


def in_both_languages(page: Page, name: str) -> None:
    """Screenshot and check the page in English, switch to Japanese (the top bar's switch), do the same,
    and switch back: the view is rendered again in the other language without a reload."""
    assert_accessible(page, name)
    screenshot(page, f"{name}-en")
    page.locator("#lang").select_option("ja")
    expect(page.locator("html")).to_have_attribute("lang", "ja")
    expect(page.locator("main[aria-busy]")).to_have_count(0)
    assert_accessible(page, f"{name} (ja)")
    screenshot(page, f"{name}-ja")
    page.locator("#lang").select_option("en")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(page.locator("main[aria-busy]")).to_have_count(0)


def drop_files(page: Page, files: dict[str, bytes]) -> None:
    """Drop files on the drop zone as a user's drag and drop does (a drop event carrying a DataTransfer)."""
    payload = {name: list(data) for name, data in files.items()}
    page.evaluate(
        """(files) => {
            const transfer = new DataTransfer();
            for (const [name, bytes] of Object.entries(files)) {
                transfer.items.add(new File([new Uint8Array(bytes)], name));
            }
            const zone = document.getElementById('dropzone');
            zone.dispatchEvent(new DragEvent('dragover', {dataTransfer: transfer, bubbles: true, cancelable: true}));
            zone.dispatchEvent(new DragEvent('drop', {dataTransfer: transfer, bubbles: true, cancelable: true}));
        }""",
        payload,
    )


def kb_id_of(page: Page) -> str:
    match = re.search(r"/console/kbs/([0-9a-f]+)/", page.url)
    assert match, page.url
    return match.group(1)


def tab(page: Page, name: str) -> None:
    page.locator("nav.tabs a", has_text=re.compile(name)).click()
    expect(page.locator("nav.tabs a.active", has_text=re.compile(name))).to_have_count(1)
    expect(page.locator("main[aria-busy]")).to_have_count(0)


# -- the day -------------------------------------------------------------------------------------------


def test_an_admin_day_in_the_console(
    ragkb: RunningRagkb, page: Page, browser: Browser, page_errors: list[str], tmp_path: Path
) -> None:
    page.goto(console_origin(ragkb) + "/console")
    page.wait_for_url("**/console/signin**")
    in_both_languages(page, "signin")
    sign_in(page, ragkb, ragkb.env["RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY"])
    other_kb = ragkb.create_kb("finance-private")
    kb_id = create_a_knowledge_base(page)
    upload_three_files_and_watch_them_settle(page)
    read_the_failure_and_the_indexed_passages(page)
    run_a_search_test(page)
    import_a_question_set_and_compare_two_runs(page, tmp_path)
    retry_the_failed_document_as_a_job(page)
    reindex_through_the_quality_gate_and_roll_back(page, ragkb, kb_id)
    fix_settings_the_server_refused(page, ragkb, kb_id)
    see_the_knowledge_bases(page, ragkb)
    new_key = create_a_read_only_key(page, ragkb)
    a_second_browser_sees_only_what_the_key_allows(browser, ragkb, new_key, kb_id, other_kb)
    delete_the_knowledge_base(page, ragkb, kb_id)


def create_a_knowledge_base(page: Page) -> str:
    page.get_by_role("button", name="New knowledge base").click()
    page.get_by_label("Name", exact=True).fill("handbook")
    page.get_by_label("Description").fill("Company rules and policies")
    page.get_by_role("button", name="Create", exact=True).click()
    page.wait_for_url("**/documents")
    return kb_id_of(page)


def upload_three_files_and_watch_them_settle(page: Page) -> None:
    """Three files dropped at once, one broken: each row follows its document live to done or failed."""
    expect(page.locator("#dropzone")).to_be_visible()
    drop_files(page, {"rules-ja.md": RULES_JA.encode(), "travel.md": TRAVEL_EN.encode(), "scan.pdf": BROKEN_PDF})
    expect(page.locator("#uploads li")).to_have_count(3)
    expect(page.locator("#uploads li.status-done")).to_have_count(2, timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("#uploads li.status-failed")).to_have_count(1, timeout=LIVE_TIMEOUT_MS)
    failed_upload = page.locator("#uploads li.status-failed")
    expect(failed_upload).to_contain_text("scan.pdf")
    expect(failed_upload.locator(".reason")).to_contain_text("PDF")
    expect(page.locator("tr.status-done")).to_have_count(2)
    in_both_languages(page, "documents")
    page.get_by_label("Status", exact=True).select_option("failed")
    expect(page.locator("tbody tr.doc-row")).to_have_count(1)
    page.get_by_label("Status", exact=True).select_option("")
    expect(page.locator("tbody tr.doc-row")).to_have_count(3)


def read_the_failure_and_the_indexed_passages(page: Page) -> None:
    page.locator("tr.status-failed a").first.click()
    expect(page.locator(".reason-text")).to_contain_text("PDF")
    assert_accessible(page, "failed document")
    screenshot(page, "document-failed-en")
    page.go_back()
    page.locator("tr.status-done a", has_text="rules-ja").click()
    expect(page.locator(".chunk").first).to_contain_text("年次有給休暇")
    expect(page.locator(".chunk .heading-path").first).to_contain_text("就業規則")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download original").click()
    assert download.value.suggested_filename == "rules-ja.md"
    assert Path(download.value.path()).read_text(encoding="utf-8") == RULES_JA
    assert_accessible(page, "document")
    screenshot(page, "document-en")


def run_a_search_test(page: Page) -> None:
    """Four runs side by side and where the expected document stands in each."""
    tab(page, "Search test")
    page.get_by_label("Query").fill("有給休暇は何日もらえますか")
    page.get_by_label("Expected documents").select_option(label="rules-ja")
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("article.run")).to_have_count(4)
    expect(page.locator("article.run").first.locator(".hit").first).to_contain_text("rules-ja")
    expect(page.locator("td .trace.found").first).to_be_visible()
    # A hit leads back to its source: the link downloads the original with the console's session.
    href = page.locator("article.run").first.locator(".hit a.hit-original").first.get_attribute("href")
    assert href and href.endswith("/original")
    assert page.request.get(page.url.split("/console")[0] + href).status == 200
    in_both_languages(page, "search")


def import_a_question_set_and_compare_two_runs(page: Page, tmp_path: Path) -> None:
    tab(page, "Evaluations")
    # q4 asks in Japanese for an English passage: the semantic leg finds it, the keyword leg cannot, so the two
    # runs compared below differ on it.
    questions = [
        ("q1", "有給休暇の日数"),
        ("q2", "expense claim deadline"),
        ("q3", "休職の条件"),
        ("q4", "経費精算の締め切り"),
    ]
    queries = tmp_path / "queries.jsonl"
    queries.write_text(
        "\n".join(json.dumps({"_id": q, "text": text}, ensure_ascii=False) for q, text in questions), encoding="utf-8"
    )
    qrels = tmp_path / "test.tsv"
    judged = [("q1", "rules-ja.md", 1), ("q2", "travel.md", 1), ("q3", "rules-ja.md", 2), ("q4", "travel.md", 1)]
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{doc}\t{grade}\n" for q, doc, grade in judged))
    page.get_by_label("Name", exact=True).fill("smoke questions")
    page.get_by_label("queries.jsonl").set_input_files(str(queries))
    page.get_by_label("qrels (.tsv)").set_input_files(str(qrels))
    page.get_by_label("Use as the re-index quality gate").check()
    page.get_by_role("button", name="Import").click()
    expect(page.locator("td", has_text="smoke questions")).to_be_visible()
    page.get_by_label("Mode", exact=True).select_option("semantic")
    page.get_by_label("Second run: mode").select_option("keyword")
    page.get_by_role("button", name="Run evaluation").click()
    expect(page.locator("svg.chart rect[fill]")).not_to_have_count(0, timeout=60_000)
    expect(page.locator("svg.chart")).to_have_attribute("role", "img")
    expect(page.locator(".eval-result table").first).to_contain_text("ndcg@10")
    expect(page.locator(".eval-result table").nth(1)).to_contain_text("q4")  # the per-query differences
    in_both_languages(page, "evaluations")


def retry_the_failed_document_as_a_job(page: Page) -> None:
    """Followed live over the job's event stream until it ends (failed again: the file is still broken)."""
    tab(page, "Jobs")
    page.get_by_role("button", name="Retry failed documents").click()
    job = page.locator("article.job").first
    expect(job).to_contain_text("Retry failed")
    expect(job.locator(".badge", has_text="failed")).to_be_visible(timeout=LIVE_TIMEOUT_MS)
    expect(job.locator(".job-errors")).to_contain_text("scan.pdf")


def reindex_through_the_quality_gate_and_roll_back(page: Page, ragkb: RunningRagkb, kb_id: str) -> None:
    """A re-index with smaller chunks, judged by the gate set imported above, then rolled back."""
    page.get_by_role("button", name="Re-index…").click()
    page.get_by_label("Target tokens").fill("128")
    page.get_by_role("button", name="Start re-index").click()
    job = page.locator("article.job").first
    expect(job).to_contain_text("Re-index")
    expect(job.locator(".badge", has_text="succeeded")).to_be_visible(timeout=LIVE_TIMEOUT_MS)
    expect(job.locator(".quality")).to_contain_text("quality gate passed")
    expect(job.locator(".quality")).to_contain_text("nDCG@10")
    assert ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()["chunking"]["target_tokens"] == 128
    in_both_languages(page, "jobs")
    page.get_by_role("button", name="Roll back").click()
    page.locator("dialog").get_by_role("button", name="Roll back").click()
    expect(page.locator("#toasts")).to_contain_text("Rolled back")
    assert ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()["chunking"]["target_tokens"] == 256


def fix_settings_the_server_refused(page: Page, ragkb: RunningRagkb, kb_id: str) -> None:
    """The server's validation errors beside the fields they are about; nothing stored until they are fixed."""
    tab(page, "Settings")
    page.get_by_label("Max tokens").fill("9999")
    page.get_by_label("top_k", exact=True).fill("0")
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator('[data-error-for="chunking.max_tokens"]')).to_contain_text("510")
    expect(page.locator('[data-error-for="retrieval.top_k"]')).not_to_be_empty()
    expect(page.get_by_label("Max tokens")).to_have_attribute("aria-invalid", "true")
    assert ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()["chunking"]["max_tokens"] == 400
    # The analyzer's BM25 k1 and b, fixed with the index: a new KB's defaults.
    bm25 = page.locator("dt", has_text="BM25 k1 / b").locator("xpath=following-sibling::dd[1]")
    expect(bm25).to_have_text("0.9 / 0.6")
    screenshot(page, "settings-en")
    page.get_by_label("Max tokens").fill("380")
    page.get_by_label("top_k", exact=True).fill("8")
    page.get_by_role("button", name="Save changes").click()
    expect(page.locator("#toasts")).to_contain_text("Settings saved")  # the PATCH has answered
    expect(page.locator('[data-error-for="chunking.max_tokens"]')).to_be_empty()
    expect(page.get_by_label("Max tokens")).to_have_value("380")
    stored = ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").json()
    assert stored["chunking"]["max_tokens"] == 380 and stored["retrieval"]["top_k"] == 8
    assert_accessible(page, "settings")


def see_the_knowledge_bases(page: Page, ragkb: RunningRagkb) -> None:
    """Document counts per status and the index size of each."""
    go(page, ragkb, "/kbs")
    # Other test modules' KBs share the stack: match the KB's link exactly, not any row mentioning it.
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name="handbook", exact=True))
    expect(row).to_contain_text("1 failed")
    expect(row.locator("td").nth(3)).to_have_text(re.compile(r"^\d+$"))
    in_both_languages(page, "knowledge-bases")


def create_a_read_only_key(page: Page, ragkb: RunningRagkb) -> str:
    """The new key is shown once, in a dialog; the list never shows it again."""
    go(page, ragkb, "/keys")
    page.get_by_role("button", name="New key").click()
    page.get_by_label("Name", exact=True).fill("helpdesk-reader")
    page.get_by_label("Access to handbook").select_option("read")
    page.get_by_role("button", name="Create key").click()
    new_key = page.locator("#new-key").input_value()
    assert new_key.startswith("rk_")
    assert_accessible(page, "new key dialog")
    screenshot(page, "new-key-en")
    page.get_by_role("button", name="I have saved it").click()
    expect(page.locator("tr", has_text="helpdesk-reader")).to_contain_text("handbook")
    expect(page.locator("#new-key")).to_have_count(0)
    assert new_key not in page.content()
    in_both_languages(page, "keys")
    return new_key


def a_second_browser_sees_only_what_the_key_allows(
    browser: Browser, ragkb: RunningRagkb, key: str, kb_id: str, other_kb: str
) -> None:
    reader_context = browser.new_context(viewport=VIEWPORT, locale="ja-JP")
    try:
        reader = reader_context.new_page()
        sign_in(reader, ragkb, key)
        expect(reader.locator("html")).to_have_attribute("lang", "ja")  # the browser's language
        expect(reader.locator("tbody tr")).to_have_count(1)
        expect(reader.locator("tbody")).to_contain_text("handbook")
        expect(reader.locator("tbody")).not_to_contain_text("finance-private")
        expect(reader.locator("nav.sidebar a[href='/console/keys']")).to_have_count(0)
        expect(reader.get_by_role("button", name="新しいナレッジベース")).to_have_count(0)
        go(reader, ragkb, f"/kbs/{other_kb}/documents")
        expect(reader.locator(".alert.error")).to_contain_text("404")
        go(reader, ragkb, f"/kbs/{kb_id}/documents")
        expect(reader.locator("tr.doc-row")).to_have_count(3)
        expect(reader.locator("#dropzone")).to_have_count(0)  # read-only: no upload
        assert [cookie["name"] for cookie in reader_context.cookies()] == ["ragkb_console"]
    finally:
        reader_context.close()


def delete_the_knowledge_base(page: Page, ragkb: RunningRagkb, kb_id: str) -> None:
    """Confirmed by typing its name; the deletion job is followed to its end."""
    go(page, ragkb, f"/kbs/{kb_id}/settings")
    page.get_by_role("button", name="Delete knowledge base…").click()
    dialog = page.locator("dialog")
    dialog.get_by_label(re.compile("Type")).fill("handbook")
    dialog.get_by_role("button", name="Delete").click()
    page.wait_for_url("**/console/kbs", timeout=LIVE_TIMEOUT_MS)
    expect(page.locator("tbody")).not_to_contain_text("handbook")
    assert ragkb.client.get(f"/v1/knowledge-bases/{kb_id}").status_code == 404


# -- security in the browser ---------------------------------------------------------------------------

HOSTILE_NAME = '<img src=x onerror="window.__pwned=1">.md'
HOSTILE_TEXT = """# <script>window.__pwned = 1</script>Heading

A paragraph with <b>bold</b> markup and <img src=x onerror="window.__pwned=1"> an image tag.
"""


def test_hostile_document_content_and_names_render_as_text(
    ragkb: RunningRagkb, admin_page: Page, page_errors: list[str], tmp_path: Path
) -> None:
    kb_id = ragkb.create_kb("hostile-content")
    hostile = tmp_path / "hostile.md"
    hostile.write_text(HOSTILE_TEXT, encoding="utf-8")
    with hostile.open("rb") as handle:
        response = ragkb.client.post(
            f"/v1/knowledge-bases/{kb_id}/documents",
            files={"file": (HOSTILE_NAME, handle)},
            data={"labels": json.dumps(["<i>label</i>"])},
        )
    document = response.json()
    assert ragkb.wait_document(kb_id, document["id"])["status"] == "done"
    page = admin_page
    go(page, ragkb, f"/kbs/{kb_id}/documents")
    row = page.locator("tr.doc-row").first
    expect(row).to_contain_text("<img src=x")
    expect(row.locator(".chip")).to_have_text("<i>label</i>")
    go(page, ragkb, f"/kbs/{kb_id}/documents/{document['id']}")
    expect(page.locator("main h1")).to_contain_text("<img src=x")
    expect(page.locator(".chunk-text").first).to_contain_text("<b>bold</b>")
    expect(page.locator(".chunk .heading-path").first).to_contain_text("<script>")
    assert page.locator("main img, main b, main script, main i").count() == 0
    assert page.evaluate("() => window.__pwned") is None
    assert_accessible(page, "hostile document")


def test_a_state_changing_request_without_the_csrf_token_is_refused(
    ragkb: RunningRagkb, admin_page: Page, page_errors: list[str]
) -> None:
    call = """async ([withToken]) => {
        const session = await (await fetch('/console/session')).json();
        const headers = {'Content-Type': 'application/json'};
        if (withToken) headers[session.csrf_header] = session.csrf_token;
        const body = JSON.stringify({name: 'csrf-' + withToken});
        const response = await fetch('/v1/knowledge-bases', {method: 'POST', headers, body});
        return [response.status, (await response.json()).title];
    }"""
    assert admin_page.evaluate(call, [False]) == [403, "Forbidden"]
    assert "csrf-false" not in {kb["name"] for kb in ragkb.client.get("/v1/knowledge-bases").json()}
    status, _ = admin_page.evaluate(call, [True])
    assert status == 201


def test_the_session_cookie_is_httponly_strict_and_ends_at_sign_out(
    ragkb: RunningRagkb, admin_page: Page, context: BrowserContext, page_errors: list[str]
) -> None:
    [cookie] = context.cookies()
    assert cookie["name"] == "ragkb_console" and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/" and not cookie["secure"]  # plain HTTP here; Secure over HTTPS
    key = ragkb.env["RAGKB_AUTH__BOOTSTRAP_ADMIN_KEY"]
    stored = admin_page.evaluate(
        "() => [document.cookie, JSON.stringify(localStorage), JSON.stringify(sessionStorage)]"
    )
    assert all(key not in value and cookie["value"] not in value for value in stored)
    with admin_page.expect_response(lambda response: response.request.method == "DELETE") as signed_out:
        admin_page.get_by_role("button", name="Sign out").click()
    assert signed_out.value.status == 204, signed_out.value.text()
    admin_page.wait_for_url("**/console/signin**")
    assert context.cookies() == []
    admin_page.goto(console_origin(ragkb) + "/console/kbs")
    admin_page.wait_for_url("**/console/signin**")
    with ragkb.client_with(None) as anonymous:
        anonymous.cookies.set("ragkb_console", cookie["value"])
        assert anonymous.get("/v1/knowledge-bases").status_code == 401
