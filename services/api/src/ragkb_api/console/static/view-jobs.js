// Jobs of a KB (sync, retry, re-index, deletion) with live progress over each job's event stream; retrying
// failed documents, re-indexing (and its quality gate), rolling back.
"use strict";

import { api, canWrite, followJob, isAdmin, paths } from "./api.js";
import { t } from "./i18n.js";
import {
  badge, button, card, clearFieldErrors, confirmDialog, el, errorBox, field, input, number, pageHeader,
  progressBar, select, showFieldErrors, toast, when,
} from "./dom.js";

const LIVE = new Set(["queued", "running"]);

// One job as a live card: progress follows the job's server-sent events until it completes.
export function jobCard(job, ctx, onComplete) {
  const node = el("article", { class: "job", "data-job": job.id });
  let stop = null;
  function draw(current) {
    const total = current.progress.total;
    const done = current.progress.current;
    node.className = "job status-" + current.status;
    node.replaceChildren(...[
      el("div", { class: "job-head" }, [
        el("div", {}, [el("strong", { text: t("job.kind." + current.kind, {}, current.kind) }), el("span", { class: "muted small mono", text: " " + current.id })]),
        badge(current.status),
      ]),
      el("div", { class: "job-progress" }, [
        progressBar(done, total, t("job.progressOf", { kind: t("job.kind." + current.kind, {}, current.kind) })),
        el("span", { class: "small", text: total ? t("job.progress", { current: number(done), total: number(total) }) : t("job.noItems") }),
      ]),
      el("div", { class: "job-counts small" }, Object.entries(current.counts).filter(([, value]) => value).map(([name, value]) => el("span", { class: "chip", text: t("job.count." + name, {}, name) + " " + number(value) }))),
      el("div", { class: "muted small", text: t("job.times", { created: when(current.created_at), finished: when(current.finished_at) }) }),
      current.quality_check ? qualityCheck(current.quality_check) : null,
      current.errors.length ? el("details", { class: "job-errors", open: current.status === "failed" }, [
        el("summary", { text: t("job.errors", { n: current.errors.length }) }),
        el("ul", {}, current.errors.map((error) => el("li", {}, [error.source_id ? el("span", { class: "mono", text: error.source_id + ": " }) : null, el("span", { text: error.message })]))),
      ]) : null,
      LIVE.has(current.status) && current.kind !== "kb_delete" && current.kind !== "reindex" && canWrite(current.knowledge_base_id)
        ? el("div", { class: "actions" }, [button(t("job.cancel"), async () => {
          try { draw(await api.post(paths.job(current.id) + "/cancel")); } catch (err) { toast(err.message, "bad"); }
        }, "ghost small")]) : null,
    ].filter(Boolean));
  }
  draw(job);
  if (LIVE.has(job.status)) {
    const live = structuredClone(job);
    stop = followJob(job.id, {
      progress: (event) => {
        live.status = "running";
        live.progress = { current: event.current, total: event.total };
        draw(live);
      },
      complete: async () => {
        try { const final = await api.get(paths.job(job.id)); draw(final); if (onComplete) onComplete(final); } catch (err) { /* the KB may be gone */ if (onComplete) onComplete(null); }
      },
      error: (event) => node.append(el("div", { class: "alert error", text: event.message || t("error") })),
    });
    if (ctx) ctx.onLeave(stop);
  }
  return node;
}

function qualityCheck(check) {
  if (check.skipped) return el("div", { class: "quality muted small" }, [badge("skipped", t("job.gateSkipped")), " ", el("span", { text: check.skipped })]);
  return el("div", { class: "quality" }, [
    badge(check.passed ? "passed" : "failed", check.passed ? t("job.gatePassed") : t("job.gateFailed")),
    el("span", { class: "small", text: t("job.gateFigures", {
      old: number(check.old_ndcg_at_10, 4), new: number(check.new_ndcg_at_10, 4),
      tolerance: check.tolerance, queries: check.queries,
    }) }),
  ]);
}

export async function jobsView(ctx) {
  const kb = ctx.kb;
  const list = el("div", { class: "jobs" });
  async function reload() {
    const jobs = await api.get(paths.jobs(kb.id));
    list.replaceChildren(...(jobs.length ? jobs.map((job) => jobCard(job, ctx, () => {})) : [el("p", { class: "muted", text: t("job.none") })]));
  }
  await reload();
  const admin = isAdmin() && kb.status === "active";
  const writable = canWrite(kb.id) && kb.status === "active";
  const reindexArea = el("div");
  const indexInfo = el("p", { class: "muted small" });
  api.get(paths.kbIndex(kb.id)).then((info) => {
    indexInfo.textContent = t("job.indexInfo", { chunks: number(info.chunks), live: info.live_generation ?? "–", generations: info.generations.join(", ") || "–" });
  }).catch(() => {});
  return el("div", {}, [
    pageHeader(t("nav.jobs"), t("job.lead"), [
      writable ? button(t("job.retryFailed"), async () => {
        try { const job = await api.post(paths.kb(kb.id) + "/retry-failed"); toast(t("job.started", { kind: t("job.kind." + job.kind) })); await reload(); } catch (err) { toast(err.message, "bad"); }
      }, "secondary") : null,
      admin ? button(t("job.reindex"), () => reindexArea.replaceChildren(reindexForm(kb, () => reindexArea.replaceChildren(), reload)), "secondary") : null,
      admin ? button(t("job.rollback"), async () => {
        if (!(await confirmDialog(t("job.rollbackTitle"), t("job.rollbackBody"), t("job.rollback")))) return;
        try { await api.post(paths.kb(kb.id) + "/rollback"); toast(t("job.rolledBack")); ctx.navigate("/kbs/" + encodeURIComponent(kb.id) + "/jobs", true); } catch (err) { toast(err.message, "bad"); }
      }, "ghost") : null,
      button(t("refresh"), () => reload(), "ghost"),
    ]),
    indexInfo,
    reindexArea,
    card(t("job.recent"), list),
  ]);
}

function reindexForm(kb, close, reload) {
  const model = input({ placeholder: kb.embedding_model });
  const target = input({ type: "number", min: 16, max: 510, placeholder: String(kb.chunking.target_tokens) });
  const max = input({ type: "number", min: 16, max: 510, placeholder: String(kb.chunking.max_tokens) });
  const overlap = input({ type: "number", min: 0, max: 255, placeholder: String(kb.chunking.overlap_tokens) });
  const japanese = select([["", t("job.keepAnalyzer")], ["sudachi", t("kb.sudachi")], ["char-bigram", t("kb.charBigram")]], "");
  const skip = input({ type: "checkbox" });
  const problem = el("div");
  const form = el("form", { class: "form-grid" }, [
    field(t("job.embeddingModel"), model, { name: "embedding_model", hint: t("job.embeddingHint") }),
    field(t("settings.target_tokens"), target, { name: "chunking.target_tokens" }),
    field(t("settings.max_tokens"), max, { name: "chunking.max_tokens" }),
    field(t("settings.overlap_tokens"), overlap, { name: "chunking.overlap_tokens" }),
    field(t("kb.japaneseAnalyzer"), japanese, { name: "analyzer" }),
    field(t("job.skipGate"), skip, { name: "skip_quality_gate", hint: t("job.skipGateHint") }),
    problem,
    el("div", { class: "actions wide" }, [button(t("cancel"), close, "ghost"), el("button", { type: "submit", class: "btn primary", text: t("job.startReindex") })]),
  ]);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFieldErrors(form);
    problem.replaceChildren();
    const body = { skip_quality_gate: skip.checked };
    if (model.value.trim()) body.embedding_model = model.value.trim();
    if (target.value || max.value || overlap.value) {
      body.chunking = Object.assign({}, kb.chunking);
      if (target.value) body.chunking.target_tokens = Number(target.value);
      if (max.value) body.chunking.max_tokens = Number(max.value);
      if (overlap.value) body.chunking.overlap_tokens = Number(overlap.value);
    }
    if (japanese.value) body.analyzer = { japanese: japanese.value };
    try {
      const job = await api.post(paths.kb(kb.id) + "/reindex", body);
      toast(t("job.started", { kind: t("job.kind." + job.kind) }));
      close();
      await reload();
    } catch (err) {
      const rest = showFieldErrors(form, err.fieldErrors());
      if (rest.length || !Object.keys(err.fieldErrors()).length) problem.replaceChildren(errorBox(err));
    }
  });
  return card(t("job.reindexTitle"), [el("p", { class: "muted", text: t("job.reindexLead") }), form]);
}
