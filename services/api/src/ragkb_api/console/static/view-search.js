// Search test (what /search-test was): one query as semantic, keyword, hybrid and hybrid+rerank side by side,
// why an expected document is or is not in each answer, and the settings each run used.
"use strict";

import { api, paths } from "./api.js";
import { t } from "./i18n.js";
import { badge, button, card, el, errorBox, field, input, link, number, pageHeader, select, short, splitList, table } from "./dom.js";

const INT_SETTINGS = ["top_k", "rrf_k", "candidate_multiplier", "rerank_budget_ms", "max_blocks", "feedback_passages"];
const FLOAT_SETTINGS = ["dense_weight", "keyword_weight", "score_threshold", "rerank_weight", "feedback_weight"];
// The last run per KB, so that a tab change or a language switch shows it again (in memory, this page only).
const lastRuns = new Map();

export async function searchChooserView(ctx) {
  const kbs = await api.get(paths.kbs);
  if (kbs.length === 1) { ctx.navigate("/kbs/" + encodeURIComponent(kbs[0].id) + "/search", true); return el("div"); }
  return el("div", {}, [
    pageHeader(t("nav.search"), t("search.chooseKb"), []),
    card(null, kbs.length ? el("ul", { class: "link-list" }, kbs.map((kb) => el("li", {}, link("/console/kbs/" + encodeURIComponent(kb.id) + "/search", kb.name)))) : el("p", { class: "muted", text: t("kb.none") })),
  ]);
}

export async function searchView(ctx) {
  const kb = ctx.kb;
  const documents = await api.get(paths.documents(kb.id) + "?status=done").catch(() => []);
  const titles = new Map(documents.map((doc) => [doc.id, doc.title || doc.source_id]));
  const query = input({ required: true, placeholder: t("search.queryPlaceholder"), class: "query" });
  const expected = new Set();
  const expectedList = el("ul", { class: "chips expected-list", "aria-live": "polite" });
  const picker = select([["", t("search.pickExpected")], ...documents.map((doc) => [doc.id, short(doc.title || doc.source_id, 60)])], "");
  const expectedIds = input({ placeholder: t("search.expectedIdsPlaceholder") });
  function drawExpected() {
    expectedList.replaceChildren(...[...expected].map((id) => el("li", { class: "chip removable" }, [
      el("span", { text: titles.get(id) || id }),
      el("button", { type: "button", class: "chip-x", "aria-label": t("search.removeExpected", { name: titles.get(id) || id }), text: "×", onclick: () => { expected.delete(id); drawExpected(); } }),
    ])));
  }
  picker.addEventListener("change", () => { if (picker.value) expected.add(picker.value); picker.value = ""; drawExpected(); });
  const overrides = {};
  const overrideFields = [...INT_SETTINGS, ...FLOAT_SETTINGS].map((name) => {
    overrides[name] = input({ type: "number", step: FLOAT_SETTINGS.includes(name) ? "0.01" : "1", min: 0, placeholder: String(kb.retrieval[name]) });
    return field(t("settings." + name), overrides[name]);
  });
  const labelsAny = input({ placeholder: t("doc.labelsPlaceholder") });
  const docType = select([["", t("doc.anyType")], ["knowledge", t("doc.knowledge")], ["reference", t("doc.reference")]], "");
  const status = el("span", { class: "muted", role: "status" });
  const results = el("div", { class: "search-results" });
  const run = el("button", { type: "submit", class: "btn primary", text: t("search.run") });
  const form = el("form", { class: "search-form" }, [
    el("div", { class: "query-row" }, [field(t("search.query"), query), run]),
    el("div", { class: "form-grid" }, [
      field(t("search.expected"), picker, { hint: t("search.expectedHint") }),
      field(t("search.expectedIds"), expectedIds),
      field(t("doc.labels"), labelsAny),
      field(t("doc.type"), docType),
    ]),
    expectedList,
    el("details", { class: "overrides" }, [el("summary", { text: t("search.overrides") }), el("div", { class: "form-grid" }, overrideFields)]),
    status,
  ]);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const settings = {};
    for (const name of [...INT_SETTINGS, ...FLOAT_SETTINGS]) {
      const raw = overrides[name].value.trim();
      if (raw !== "") settings[name] = Number(raw);
    }
    const filters = {};
    const labels = splitList(labelsAny.value, /,/);
    if (labels.length) filters.labels_any = labels;
    if (docType.value) filters.doc_types = [docType.value];
    const expectedIdsList = [...expected, ...splitList(expectedIds.value, /[\s,]+/)];
    run.disabled = true;
    status.textContent = t("search.running");
    const started = performance.now();
    try {
      const data = await api.post(paths.kb(kb.id) + "/search-test", { query: query.value, settings, filters, expected_document_ids: expectedIdsList });
      lastRuns.set(kb.id, { query: query.value, expected: expectedIdsList, data });
      results.replaceChildren(renderResults(data, new Set(expectedIdsList), titles));
      status.textContent = t("search.done", { ms: number(performance.now() - started) });
    } catch (err) {
      results.replaceChildren(errorBox(err));
      status.textContent = "";
    } finally {
      run.disabled = false;
    }
  });
  const last = lastRuns.get(kb.id);
  if (last) {
    query.value = last.query;
    for (const id of last.expected) if (titles.has(id)) expected.add(id);
    drawExpected();
    results.replaceChildren(renderResults(last.data, new Set(last.expected), titles));
  }
  return el("div", {}, [pageHeader(t("nav.search"), t("search.lead"), []), card(null, form), results]);
}

function renderResults(data, expected, titles) {
  return el("div", {}, [
    expected.size ? card(t("search.whyNot"), table(
      [{ label: t("search.expectedDocument"), render: (id) => el("span", { text: titles.get(id) || id }) },
        ...data.runs.map((run) => ({ label: run.name, render: (id) => traceCell((run.expected || []).find((trace) => trace.document_id === id)) }))],
      [...expected], { compact: true, caption: t("search.whyNot") })) : null,
    el("div", { class: "runs" }, data.runs.map((run) => renderRun(run, expected))),
  ]);
}

function traceCell(trace) {
  if (!trace) return el("span", { class: "muted", text: "–" });
  const found = trace.answer_rank !== null && trace.answer_rank !== undefined;
  return el("div", { class: found ? "trace found" : "trace missing" }, [
    el("strong", { text: found ? t("search.rank", { rank: trace.answer_rank }) : trace.dropped_by ? t("search.droppedBy", { stage: trace.dropped_by }) : t("search.notInAnswer") }),
    el("div", { class: "small", text: t("search.legRanks", { dense: trace.dense_rank ?? "–", keyword: trace.keyword_rank ?? "–", fused: trace.fused_rank ?? "–" }) }),
    found ? null : el("div", { class: "small", text: trace.explanation }),
  ]);
}

function renderRun(run, expected) {
  const result = run.result;
  const effective = Object.values(result.effective_settings || {})[0];
  return el("article", { class: "run" }, [
    el("header", { class: "run-head" }, [
      el("h2", { text: run.name }),
      result.degraded ? badge("failed", t("search.degraded")) : badge("done", result.reranked ? t("search.reranked") : t("search.ok")),
    ]),
    el("div", { class: "muted small", text: t("search.took", { mode: result.mode, ms: number(result.took_ms, 1) }) + (result.reranker_model ? " · " + result.reranker_model : "") }),
    result.degraded && result.degraded_reason ? el("div", { class: "alert warn small", text: result.degraded_reason }) : null,
    el("div", { class: "timings" }, Object.entries(result.timings_ms || {}).map(([stage, ms]) => el("span", { text: stage + " " + number(ms, 1) + " ms" }))),
    result.results.length ? el("ol", { class: "hits" }, result.results.map((hit, index) => el("li", { class: expected.has(hit.document_id) ? "hit expected" : "hit" }, [
      el("div", { class: "hit-title" }, [el("span", { class: "rank", text: "#" + (index + 1) }), el("span", { text: hit.title || hit.source_id }), expected.has(hit.document_id) ? el("span", { class: "chip star", text: t("search.expectedMark") }) : null]),
      el("div", { class: "muted small mono" }, [
        el("span", { text: hit.source_id + (hit.page ? " · p. " + hit.page : "") + " · " }),
        hit.original_url ? el("a", { href: hit.original_url, download: "", class: "hit-original", text: t("search.original") }) : null,
      ]),
      el("p", { class: "hit-text", text: short(hit.text, 280) }),
      el("div", { class: "scores", text: [
        "score " + number(hit.score, 4),
        "dense #" + (hit.dense_rank ?? "–") + " " + number(hit.dense_score, 3),
        "kw #" + (hit.keyword_rank ?? "–") + " " + number(hit.keyword_score, 3),
        "fused #" + (hit.fused_rank ?? "–"),
        "rerank " + number(hit.rerank_score, 3),
      ].join(" · ") }),
    ]))) : el("p", { class: "muted", text: t("search.noPassages") }),
    (result.dropped || []).length ? el("details", {}, [
      el("summary", { text: t("search.dropped", { n: result.dropped.length }) }),
      el("ul", { class: "dropped" }, result.dropped.map((drop) => el("li", {}, [el("strong", { text: drop.stage + ": " }), el("span", { text: (drop.hit.title || drop.hit.document_id) + " — " + drop.reason })]))),
    ]) : null,
    effective ? el("details", { class: "effective" }, [
      el("summary", { text: t("search.effective") }),
      el("dl", { class: "facts small" }, Object.entries(effective).flatMap(([name, value]) => [el("dt", { text: name }), el("dd", { class: "mono", text: value === null ? "null" : typeof value === "object" ? JSON.stringify(value) : String(value) })])),
    ]) : null,
  ]);
}
