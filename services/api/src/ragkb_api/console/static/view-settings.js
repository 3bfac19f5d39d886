// A KB's settings (general, chunking, retrieval, sync rules) with the server's validation errors beside each
// field, its analyzer (changed only by re-indexing), and deleting it with the deletion job's progress.
"use strict";

import { api, isAdmin, paths } from "./api.js";
import { t } from "./i18n.js";
import { button, card, clearFieldErrors, confirmDialog, el, errorBox, field, input, pageHeader, select, showFieldErrors, splitList, toast } from "./dom.js";
import { jobCard } from "./view-jobs.js";

const NUMBER_FIELDS = {
  chunking: [["target_tokens", 16, 510, 1], ["max_tokens", 16, 510, 1], ["overlap_tokens", 0, 255, 1]],
  retrieval: [
    ["top_k", 1, 200, 1], ["rrf_k", 1, 1000, 1], ["dense_weight", 0, 10, 0.1], ["keyword_weight", 0, 10, 0.1], ["second_weight", 0, 10, 0.1],
    ["candidate_multiplier", 1, 50, 1], ["score_threshold", 0, 1, 0.01], ["rerank_budget_ms", 0, 60000, 100],
    ["rerank_weight", 0, 1, 0.05], ["feedback_passages", 0, 20, 1], ["feedback_weight", 0, 5, 0.1], ["max_blocks", 1, 200, 1],
  ],
};

export async function settingsView(ctx) {
  const kb = ctx.kb;
  const admin = isAdmin() && kb.status === "active";
  const controls = {};
  const numberField = (group, [name, min, max, step]) => {
    const control = input({ type: "number", min, max, step, value: kb[group][name], disabled: !admin });
    controls[group + "." + name] = control;
    return field(t("settings." + name), control, { name: group + "." + name, hint: t("settings.hint." + name, {}, "") || null });
  };
  const name = input({ value: kb.name, maxlength: 200, disabled: !admin });
  const description = el("textarea", { rows: 2, maxlength: 2000, disabled: !admin });
  description.value = kb.description;
  const noise = el("textarea", { rows: 3, class: "mono", disabled: !admin });
  noise.value = kb.chunking.noise_patterns.join("\n");
  const precision = select([["auto", t("settings.precisionAuto")], ["float32", t("settings.precisionFloat32")], ["int8-block", t("settings.precisionInt8Block")], ["int8-mixed", t("settings.precisionInt8Mixed")], ["int8", t("settings.precisionInt8")]], kb.chunking.passage_precision, { disabled: !admin });
  const hybrid = input({ type: "checkbox", checked: kb.retrieval.hybrid, disabled: !admin });
  const fusion = select([["dbsf", "DBSF"], ["rrf", "RRF"]], kb.retrieval.fusion, { disabled: !admin });
  const rerank = select([["auto", t("settings.rerankAuto")], ["true", t("settings.rerankOn")], ["false", t("settings.rerankOff")]], kb.retrieval.rerank === null ? "auto" : String(kb.retrieval.rerank), { disabled: !admin });
  const reranker = input({ value: kb.retrieval.reranker_model || "", placeholder: t("settings.serverDefault"), disabled: !admin });
  const include = el("textarea", { rows: 2, class: "mono", disabled: !admin });
  include.value = kb.sync.include_prefixes.join("\n");
  const exclude = el("textarea", { rows: 4, class: "mono", disabled: !admin });
  exclude.value = kb.sync.exclude_patterns.join("\n");
  const extensions = el("textarea", { rows: 2, class: "mono", disabled: !admin });
  extensions.value = kb.sync.extensions.join(" ");
  const problem = el("div");
  const form = el("form", { class: "settings-form", novalidate: true }, [
    el("fieldset", {}, [el("legend", { text: t("settings.general") }), el("div", { class: "form-grid" }, [
      field(t("kb.name"), name, { name: "name" }),
      field(t("kb.description"), description, { name: "description", wide: true }),
    ])]),
    el("fieldset", {}, [el("legend", { text: t("settings.chunking") }), el("p", { class: "muted small", text: t("settings.chunkingLead") }), el("div", { class: "form-grid" }, [
      ...NUMBER_FIELDS.chunking.map((spec) => numberField("chunking", spec)),
      field(t("settings.passage_precision"), precision, { name: "chunking.passage_precision", hint: t("settings.hint.passage_precision") }),
      field(t("settings.noise_patterns"), noise, { name: "chunking.noise_patterns", wide: true, hint: t("settings.onePerLine") }),
      el("small", { class: "field-error wide", "data-error-for": "chunking", role: "alert" }),
    ])]),
    el("fieldset", {}, [el("legend", { text: t("settings.retrieval") }), el("p", { class: "muted small", text: t("settings.retrievalLead") }), el("div", { class: "form-grid" }, [
      field(t("settings.hybrid"), hybrid, { name: "retrieval.hybrid" }),
      field(t("settings.fusion"), fusion, { name: "retrieval.fusion" }),
      field(t("settings.rerank"), rerank, { name: "retrieval.rerank" }),
      field(t("settings.reranker_model"), reranker, { name: "retrieval.reranker_model" }),
      ...NUMBER_FIELDS.retrieval.map((spec) => numberField("retrieval", spec)),
      el("small", { class: "field-error wide", "data-error-for": "retrieval", role: "alert" }),
    ])]),
    el("fieldset", {}, [el("legend", { text: t("settings.sync") }), el("p", { class: "muted small", text: t("settings.syncLead") }), el("div", { class: "form-grid" }, [
      field(t("settings.include_prefixes"), include, { name: "sync.include_prefixes", hint: t("settings.onePerLine") }),
      field(t("settings.exclude_patterns"), exclude, { name: "sync.exclude_patterns", hint: t("settings.onePerLine") }),
      field(t("settings.extensions"), extensions, { name: "sync.extensions", wide: true }),
      el("small", { class: "field-error wide", "data-error-for": "sync", role: "alert" }),
    ])]),
    problem,
    admin ? el("div", { class: "actions" }, [el("button", { type: "submit", class: "btn primary", text: t("save") })]) : null,
  ]);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFieldErrors(form);
    problem.replaceChildren();
    const numbers = (group) => Object.fromEntries(NUMBER_FIELDS[group].map(([fieldName]) => {
      const raw = controls[group + "." + fieldName].value.trim();
      return [fieldName, raw === "" ? null : Number(raw)];
    }));
    const body = {
      name: name.value,
      description: description.value,
      // The whole chunking is replaced: what the form does not show (OCR) is sent as it is.
      chunking: Object.assign(numbers("chunking"), {
        noise_patterns: splitList(noise.value, /\n/), ocr: kb.chunking.ocr, passage_precision: precision.value,
      }),
      retrieval: Object.assign(numbers("retrieval"), {
        hybrid: hybrid.checked, fusion: fusion.value,
        rerank: rerank.value === "auto" ? null : rerank.value === "true",
        reranker_model: reranker.value.trim() || null,
      }),
      sync: {
        include_prefixes: splitList(include.value, /\n/),
        exclude_patterns: splitList(exclude.value, /\n/),
        extensions: splitList(extensions.value, /[\s,]+/),
      },
    };
    try {
      await api.patch(paths.kb(kb.id), body);
      toast(t("settings.saved"));
      ctx.navigate("/kbs/" + encodeURIComponent(kb.id) + "/settings", true);
    } catch (err) {
      const errors = err.fieldErrors ? err.fieldErrors() : {};
      const rest = showFieldErrors(form, errors);
      if (rest.length || !Object.keys(errors).length) problem.replaceChildren(errorBox(err));
      else problem.replaceChildren(el("div", { class: "alert error", role: "alert", text: t("settings.fixFields") }));
    }
  });

  const deletion = el("div");
  if (kb.status === "deleting" && kb.deletion_job_id) {
    api.get(paths.job(kb.deletion_job_id)).then((job) => deletion.replaceChildren(jobCard(job, ctx, () => ctx.navigate("/kbs")))).catch(() => {});
  }
  return el("div", {}, [
    pageHeader(t("nav.settings"), t("settings.lead"), []),
    card(null, form),
    card(t("settings.analyzer"), [
      el("p", { class: "muted small", text: t("settings.analyzerLead") }),
      el("dl", { class: "facts" }, [
        el("dt", { text: t("kb.japaneseAnalyzer") }), el("dd", { text: kb.analyzer.japanese }),
        el("dt", { text: t("kb.charBigrams") }), el("dd", { text: String(kb.analyzer.char_bigrams) }),
        el("dt", { text: t("settings.bm25") }), el("dd", { class: "mono", text: `${kb.analyzer.bm25_k1} / ${kb.analyzer.bm25_b}` }),
        el("dt", { text: t("settings.analyzerVersion") }), el("dd", { class: "mono", text: kb.analyzer_version }),
        el("dt", { text: t("kb.model") }), el("dd", { class: "mono", text: kb.embedding_model }),
        // Fixed with the index like the model (the form's PATCH leaves it out, which keeps it).
        el("dt", { text: t("settings.second_model") }),
        el("dd", { class: "mono", text: kb.chunking.second_model || t("settings.secondModelNone"), title: t("settings.hint.second_model") }),
      ]),
    ]),
    isAdmin() ? card(t("settings.danger"), [
      el("p", { text: t("settings.deleteLead") }),
      kb.status === "active" ? button(t("settings.deleteKb"), async () => {
        if (!(await confirmDialog(t("settings.deleteTitle"), t("settings.deleteBody", { name: kb.name }), t("delete"), kb.name))) return;
        try {
          const job = await api.del(paths.kb(kb.id));
          deletion.replaceChildren(jobCard(job, ctx, (final) => {
            if (!final || final.status === "succeeded") { toast(t("settings.deleted", { name: kb.name })); ctx.navigate("/kbs"); }
          }));
        } catch (err) { deletion.replaceChildren(errorBox(err)); }
      }, "danger") : null,
      deletion,
    ]) : null,
  ]);
}
