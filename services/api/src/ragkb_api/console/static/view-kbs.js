// Knowledge bases: the list (documents per status, index size) and creating one.
"use strict";

import { api, isAdmin, paths } from "./api.js";
import { t } from "./i18n.js";
import { badge, button, card, clearFieldErrors, el, errorBox, field, input, link, number, pageHeader, select, showFieldErrors, table, toast, when } from "./dom.js";

export async function kbListView(ctx) {
  const kbs = await api.get(paths.kbs);
  const sizes = new Map();
  const rows = table([
    { label: t("kb.name"), render: (kb) => el("div", {}, [link("/console/kbs/" + encodeURIComponent(kb.id) + "/documents", kb.name, { class: "strong" }), kb.description ? el("div", { class: "muted small", text: kb.description }) : null]) },
    { label: t("kb.status"), render: (kb) => badge(kb.status) },
    { label: t("kb.documents"), class: "num", render: (kb) => documentCounts(kb.document_counts) },
    { label: t("kb.chunks"), class: "num", render: (kb) => { const cell = el("span", { class: "muted", text: "…" }); sizes.set(kb.id, cell); return cell; } },
    { label: t("kb.model"), render: (kb) => el("code", { text: kb.embedding_model }) },
    { label: t("kb.analyzer"), render: (kb) => kb.analyzer.japanese + (kb.analyzer.char_bigrams ? " + bigrams" : "") },
    { label: t("created"), class: "date", render: (kb) => when(kb.created_at) },
  ], kbs, { empty: t("kb.none"), caption: t("nav.kbs") });
  // Index sizes come from the retriever, one KB at a time: the list shows at once and fills in.
  for (const kb of kbs) {
    api.get(paths.kbIndex(kb.id)).then((info) => {
      const cell = sizes.get(kb.id);
      if (cell) { cell.textContent = number(info.chunks); cell.className = ""; }
    }).catch(() => { const cell = sizes.get(kb.id); if (cell) cell.textContent = "–"; });
  }
  const creator = el("div");
  const newButton = isAdmin() ? button(t("kb.new"), () => { creator.replaceChildren(createForm(ctx, () => creator.replaceChildren())); newButton.hidden = true; }, "primary") : null;
  return el("div", {}, [
    pageHeader(t("nav.kbs"), t("kb.lead"), [newButton]),
    creator,
    card(null, rows),
  ]);
}

function documentCounts(counts) {
  const total = Object.values(counts || {}).reduce((sum, value) => sum + value, 0);
  return el("span", { class: "counts" }, [
    el("span", { class: "strong", text: number(total) }),
    counts.failed ? badge("failed", t("kb.failedCount", { n: counts.failed })) : null,
    counts.pending || counts.processing ? badge("processing", t("kb.inFlight", { n: (counts.pending || 0) + (counts.processing || 0) })) : null,
  ]);
}

function createForm(ctx, close) {
  const name = input({ required: true, maxlength: 200, autocomplete: "off" });
  const description = el("textarea", { rows: 2, maxlength: 2000 });
  const japanese = select([["sudachi", t("kb.sudachi")], ["char-bigram", t("kb.charBigram")]], "sudachi");
  const bigrams = input({ type: "checkbox", checked: true });
  const problem = el("div");
  const form = el("form", { class: "form-grid" }, [
    field(t("kb.name"), name, { name: "name" }),
    field(t("kb.description"), description, { name: "description", wide: true }),
    field(t("kb.japaneseAnalyzer"), japanese, { name: "analyzer.japanese", hint: t("kb.analyzerHint") }),
    field(t("kb.charBigrams"), bigrams, { name: "analyzer.char_bigrams" }),
    problem,
    el("div", { class: "actions wide" }, [button(t("cancel"), close, "ghost"), el("button", { type: "submit", class: "btn primary", text: t("create") })]),
  ]);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFieldErrors(form);
    problem.replaceChildren();
    try {
      const kb = await api.post(paths.kbs, {
        name: name.value, description: description.value,
        analyzer: japanese.value === "sudachi" ? { japanese: "sudachi", char_bigrams: bigrams.checked } : { japanese: japanese.value },
      });
      toast(t("kb.created", { name: kb.name }));
      ctx.navigate("/kbs/" + encodeURIComponent(kb.id) + "/documents");
    } catch (err) {
      const rest = showFieldErrors(form, err.fieldErrors ? err.fieldErrors() : {});
      if (rest.length || !Object.keys(err.fieldErrors ? err.fieldErrors() : {}).length) problem.replaceChildren(errorBox(err));
    }
  });
  return card(t("kb.new"), form);
}
