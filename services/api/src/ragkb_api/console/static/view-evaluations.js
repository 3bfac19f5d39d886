// Evaluations: question sets (BEIR import), runs of a set under two settings with the per-query differences,
// and a chart of the metrics.
"use strict";

import { api, canWrite, paths, upload } from "./api.js";
import { t } from "./i18n.js";
import { barChart } from "./chart.js";
import {
  badge, button, card, confirmDialog, el, errorBox, field, input, number, pageHeader, select, short, table, toast, when,
} from "./dom.js";

const MODES = [["", "kb"], ["hybrid", "hybrid"], ["semantic", "semantic"], ["keyword", "keyword"]];
// Runs made on this page, newest first: the API evaluates on demand and keeps no history of its own.
const history = [];

export async function evaluationsView(ctx) {
  const kb = ctx.kb;
  const writable = canWrite(kb.id) && kb.status === "active";
  const setsArea = el("div");
  const runArea = el("div");
  const resultArea = el("div", { id: "evaluation-result" });
  let sets = [];

  async function reloadSets() {
    sets = await api.get(paths.questionSets(kb.id));
    setsArea.replaceChildren(table([
      { label: t("eval.setName"), render: (set) => el("span", { class: "strong", text: set.name }) },
      { label: t("eval.queries"), class: "num", render: (set) => number(set.query_count) },
      { label: t("eval.judgements"), class: "num", render: (set) => number(set.judgement_count) },
      { label: t("eval.gate"), render: (set) => set.quality_gate ? badge("active", t("eval.isGate")) : el("span", { class: "muted", text: "–" }) },
      { label: t("created"), class: "date", render: (set) => when(set.created_at) },
      { label: t("actions"), render: (set) => writable ? el("div", { class: "row-actions" }, [
        set.quality_gate ? null : button(t("eval.makeGate"), async () => {
          try { await api.patch(paths.questionSets(kb.id) + "/" + encodeURIComponent(set.id), { quality_gate: true }); await reloadSets(); } catch (err) { toast(err.message, "bad"); }
        }, "ghost small"),
        button(t("delete"), async () => {
          if (!(await confirmDialog(t("eval.deleteSet"), t("eval.deleteSetBody", { name: set.name }), t("delete")))) return;
          try { await api.del(paths.questionSets(kb.id) + "/" + encodeURIComponent(set.id)); await reloadSets(); } catch (err) { toast(err.message, "bad"); }
        }, "ghost small danger-text"),
      ]) : null },
    ], sets, { empty: t("eval.noSets"), caption: t("eval.sets") }));
    runArea.replaceChildren(runForm(kb, sets, resultArea));
  }
  await reloadSets();
  if (history.length && history[0].kbId === kb.id) resultArea.replaceChildren(renderResult(history[0].result, null));
  return el("div", {}, [
    pageHeader(t("nav.evaluations"), t("eval.lead"), []),
    card(t("eval.sets"), setsArea),
    el("div", { class: "two-col eval-forms" }, [
      card(t("eval.run"), runArea),
      writable ? card(t("eval.import"), importForm(kb, reloadSets)) : null,
    ]),
    resultArea,
  ]);
}

function importForm(kb, reloadSets) {
  const name = input({ required: true, maxlength: 200 });
  const queries = input({ type: "file", accept: ".jsonl,.json,application/json" });
  const qrels = input({ type: "file", accept: ".tsv,.txt,text/tab-separated-values" });
  const gate = input({ type: "checkbox" });
  const problem = el("div");
  const form = el("form", { class: "stack" }, [
    el("p", { class: "muted small", text: t("eval.importLead") }),
    field(t("eval.setName"), name),
    field(t("eval.queriesFile"), queries),
    field(t("eval.qrelsFile"), qrels),
    field(t("eval.asGate"), gate),
    problem,
    el("div", { class: "actions" }, [el("button", { type: "submit", class: "btn primary", text: t("eval.importButton") })]),
  ]);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    problem.replaceChildren();
    if (!queries.files.length || !qrels.files.length) { problem.replaceChildren(el("div", { class: "alert error", role: "alert", text: t("eval.needFiles") })); return; }
    const body = new FormData();
    body.append("name", name.value);
    body.append("queries", queries.files[0], queries.files[0].name);
    body.append("qrels", qrels.files[0], qrels.files[0].name);
    body.append("quality_gate", gate.checked ? "true" : "false");
    try {
      const set = await upload(paths.questionSets(kb.id), body, () => {});
      toast(t("eval.imported", { name: set.name, n: set.query_count }));
      form.reset();
      await reloadSets();
    } catch (err) { problem.replaceChildren(errorBox(err)); }
  });
  return form;
}

function settingsInput(placeholder) {
  return el("textarea", { rows: 2, class: "mono", placeholder: placeholder || '{"top_k": 20}' });
}

function runForm(kb, sets, resultArea) {
  if (!sets.length) return el("p", { class: "muted", text: t("eval.importFirst") });
  const set = select(sets.map((item) => [item.id, item.name + " (" + item.query_count + ")"]), sets[0].id);
  const mode = select(MODES.map(([value, label]) => [value, value ? label : t("eval.kbMode")]), "");
  const settings = settingsInput();
  const compare = input({ type: "checkbox", checked: true });
  const compareMode = select(MODES.map(([value, label]) => [value, value ? label : t("eval.kbMode")]), "keyword");
  const compareSettings = settingsInput();
  const maxQueries = input({ type: "number", min: 1, placeholder: t("eval.all") });
  const status = el("span", { class: "muted", role: "status" });
  const problem = el("div");
  const runButton = el("button", { type: "submit", class: "btn primary", text: t("eval.runButton") });
  const compareFields = el("div", { class: "form-grid" }, [field(t("eval.compareMode"), compareMode), field(t("eval.compareSettings"), compareSettings, { name: "compare.settings", hint: t("eval.settingsHint"), wide: true })]);
  compare.addEventListener("change", () => { compareFields.hidden = !compare.checked; });
  const form = el("form", { class: "stack" }, [
    el("div", { class: "form-grid" }, [
      field(t("eval.set"), set),
      field(t("eval.maxQueries"), maxQueries, { name: "max_queries" }),
      field(t("eval.mode"), mode),
      field(t("eval.settings"), settings, { name: "settings", hint: t("eval.settingsHint"), wide: true }),
    ]),
    field(t("eval.compare"), compare),
    compareFields,
    problem,
    el("div", { class: "actions" }, [status, runButton]),
  ]);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    problem.replaceChildren();
    let body;
    try {
      body = { question_set_id: set.value, mode: mode.value || null, settings: parseSettings(settings.value) };
      if (compare.checked) body.compare = { mode: compareMode.value || null, settings: parseSettings(compareSettings.value) };
      if (maxQueries.value) body.max_queries = Number(maxQueries.value);
    } catch (err) {
      problem.replaceChildren(el("div", { class: "alert error", role: "alert", text: err.message }));
      return;
    }
    runButton.disabled = true;
    status.textContent = t("eval.running");
    try {
      const result = await api.post(paths.kb(kb.id) + "/evaluations", body);
      const detail = await api.get(paths.questionSets(kb.id) + "/" + encodeURIComponent(set.value)).catch(() => null);
      history.unshift({ kbId: kb.id, result });
      resultArea.replaceChildren(renderResult(result, detail));
      status.textContent = t("eval.done", { ms: number(result.took_ms) });
    } catch (err) {
      problem.replaceChildren(errorBox(err));
      status.textContent = "";
    } finally {
      runButton.disabled = false;
    }
  });
  return form;
}

function parseSettings(text) {
  if (!text.trim()) return {};
  let parsed;
  try { parsed = JSON.parse(text); } catch (err) { throw new Error(t("eval.badJson", { error: err.message })); }
  if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) throw new Error(t("eval.badJson", { error: "{…}" }));
  return parsed;
}

function runName(run, fallback) {
  return run.mode || fallback;
}

function renderResult(result, detail) {
  const metrics = Object.keys(result.metrics);
  const base = { name: t("eval.base") + ": " + runName(result, "kb"), values: result.metrics };
  const series = [base];
  if (result.compare) series.push({ name: t("eval.compareRun") + ": " + runName(result.compare, "kb"), values: result.compare.metrics });
  const texts = new Map(detail ? detail.queries.map((query) => [query.id, query.text]) : []);
  const metricRows = metrics.map((metric) => ({ metric, base: result.metrics[metric], other: result.compare ? result.compare.metrics[metric] : null, diff: result.compare ? result.compare.per_metric[metric] : null }));
  const headline = metrics[0];
  const perQuery = result.compare ? result.per_query.map((query) => {
    const other = result.compare.per_query.find((item) => item.query_id === query.query_id);
    const a = query.metrics[headline];
    const b = other ? other.metrics[headline] : null;
    return { id: query.query_id, a, b, delta: b === null ? null : b - a, ranked: query.ranked, otherRanked: other ? other.ranked : [] };
  }).filter((row) => row.delta !== null && Math.abs(row.delta) > 1e-9).sort((x, y) => Math.abs(y.delta) - Math.abs(x.delta)) : [];
  return el("div", { class: "eval-result" }, [
    card(t("eval.metrics", { queries: result.queries, depth: result.depth }), el("div", { class: "two-col" }, [
      table([
        { label: t("eval.metric"), render: (row) => el("span", { class: "strong", title: result.metric_definitions[row.metric] || "", text: row.metric }) },
        { label: t("eval.base"), class: "num", render: (row) => number(row.base, 4) },
        result.compare ? { label: t("eval.compareRun"), class: "num", render: (row) => number(row.other, 4) } : null,
        result.compare ? { label: t("eval.delta"), class: "num", render: (row) => el("span", { class: row.diff.delta > 0 ? "up" : row.diff.delta < 0 ? "down" : "", text: (row.diff.delta > 0 ? "+" : "") + number(row.diff.delta, 4) }) } : null,
        result.compare ? { label: t("eval.winsLosses"), class: "num", render: (row) => row.diff.wins + " / " + row.diff.losses + " / " + row.diff.ties } : null,
      ].filter(Boolean), metricRows, { compact: true, caption: t("eval.metric") }),
      el("figure", { class: "chart-box" }, [barChart(t("eval.chartTitle"), metrics, series), el("figcaption", { class: "muted small", text: t("eval.chartCaption") })]),
    ])),
    result.degraded_queries ? el("div", { class: "alert warn", text: t("eval.degraded", { n: result.degraded_queries }) + " " + result.degraded_reasons.join("; ") }) : null,
    result.compare ? card(t("eval.perQuery", { metric: headline, n: perQuery.length }), table([
      { label: t("eval.query"), render: (row) => el("div", {}, [el("span", { class: "mono small", text: row.id }), texts.has(row.id) ? el("div", { text: short(texts.get(row.id), 120) }) : null]) },
      { label: t("eval.base"), class: "num", render: (row) => number(row.a, 3) },
      { label: t("eval.compareRun"), class: "num", render: (row) => number(row.b, 3) },
      { label: t("eval.delta"), class: "num", render: (row) => el("span", { class: row.delta > 0 ? "up" : "down", text: (row.delta > 0 ? "+" : "") + number(row.delta, 3) }) },
      { label: t("eval.topDocs"), render: (row) => el("div", { class: "small mono" }, [el("div", { text: "A: " + row.ranked.slice(0, 3).join(", ") }), el("div", { text: "B: " + row.otherRanked.slice(0, 3).join(", ") })]) },
    ], perQuery.slice(0, 50), { compact: true, empty: t("eval.noDifferences") })) : null,
  ]);
}
