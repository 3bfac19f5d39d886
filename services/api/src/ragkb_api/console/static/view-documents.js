// Documents of a KB: drag-and-drop upload with per-file progress, the list with filters and live status,
// and one document: its failure reason, original, chunks as indexed.
"use strict";

import { api, canWrite, paths, upload } from "./api.js";
import { t } from "./i18n.js";
import {
  badge, button, bytes, card, confirmDialog, el, errorBox, field, input, link, number, pageHeader,
  progressBar, select, short, splitList, table, toast, when,
} from "./dom.js";

const PAGE_SIZE = 50;
const POLL_MS = 1200;
const PARALLEL_UPLOADS = 3;
const IN_FLIGHT = new Set(["pending", "processing"]);

export async function documentsView(ctx) {
  const kb = ctx.kb;
  const state = { documents: await api.get(paths.documents(kb.id)), page: 0, uploads: [] };
  const filters = {
    text: input({ type: "search", placeholder: t("doc.searchPlaceholder") }),
    status: select([["", t("doc.anyStatus")], ...["pending", "processing", "done", "failed"].map((s) => [s, t("status." + s)])], ""),
    label: select([["", t("doc.anyLabel")]], ""),
    docType: select([["", t("doc.anyType")], ["knowledge", t("doc.knowledge")], ["reference", t("doc.reference")]], ""),
    format: select([["", t("doc.anyFormat")]], ""),
  };
  const listArea = el("div");
  const summary = el("p", { class: "muted", role: "status" });
  const uploadsArea = el("ul", { class: "upload-list", id: "uploads", "aria-label": t("doc.uploads") });

  function refreshFilterChoices() {
    const labels = [...new Set(state.documents.flatMap((doc) => doc.labels))].sort();
    const formats = [...new Set(state.documents.map((doc) => doc.media_type))].sort();
    resetOptions(filters.label, [["", t("doc.anyLabel")], ...labels.map((label) => [label, label])]);
    resetOptions(filters.format, [["", t("doc.anyFormat")], ...formats.map((format) => [format, format])]);
  }

  function visible() {
    const text = filters.text.value.trim().toLowerCase();
    return state.documents.filter((doc) =>
      (!filters.status.value || doc.status === filters.status.value)
      && (!filters.label.value || doc.labels.includes(filters.label.value))
      && (!filters.docType.value || doc.doc_type === filters.docType.value)
      && (!filters.format.value || doc.media_type === filters.format.value)
      && (!text || doc.title.toLowerCase().includes(text) || doc.source_id.toLowerCase().includes(text)));
  }

  function renderList() {
    const shown = visible();
    const pages = Math.max(1, Math.ceil(shown.length / PAGE_SIZE));
    state.page = Math.min(state.page, pages - 1);
    const slice = shown.slice(state.page * PAGE_SIZE, (state.page + 1) * PAGE_SIZE);
    const counts = countBy(state.documents, (doc) => doc.status);
    summary.textContent = t("doc.summary", { shown: shown.length, total: state.documents.length, done: counts.done || 0, failed: counts.failed || 0, inFlight: (counts.pending || 0) + (counts.processing || 0) });
    listArea.replaceChildren(...[
      table([
        { label: t("doc.title"), render: (doc) => el("div", { class: "doc-title" }, [
          link("/console/kbs/" + encodeURIComponent(kb.id) + "/documents/" + encodeURIComponent(doc.id), doc.title || doc.source_id, { class: "strong" }),
          el("div", { class: "muted small mono", text: doc.source_id }),
          doc.status === "failed" && doc.error ? el("div", { class: "reason", text: short(doc.error, 160) }) : null,
        ]) },
        { label: t("doc.status"), class: "nowrap", render: (doc) => badge(doc.status) },
        { label: t("doc.type"), class: "nowrap", render: (doc) => t("doc." + doc.doc_type) },
        { label: t("doc.format"), render: (doc) => el("span", { class: "mono small", text: doc.media_type }) },
        { label: t("doc.labels"), render: (doc) => labelChips(doc.labels) },
        { label: t("doc.chunks"), class: "num", render: (doc) => number(doc.chunk_count) },
        { label: t("doc.size"), class: "num", render: (doc) => bytes(doc.size_bytes) },
        { label: t("updated"), class: "date", render: (doc) => when(doc.updated_at) },
      ], slice, { empty: state.documents.length ? t("doc.noMatch") : t("doc.none"), caption: t("nav.documents"), rowClass: (doc) => "doc-row status-" + doc.status }),
      pages > 1 ? el("div", { class: "pager" }, [
        button(t("previous"), () => { state.page -= 1; renderList(); }, "ghost small", { disabled: state.page === 0 }),
        el("span", { text: t("pageOf", { page: state.page + 1, pages }) }),
        button(t("next"), () => { state.page += 1; renderList(); }, "ghost small", { disabled: state.page >= pages - 1 }),
      ]) : null,
    ].filter(Boolean));
  }

  // Live status: while documents are in flight, ask for the in-flight lists and re-read those that left them.
  let timer = null;
  let stopped = false;
  ctx.onLeave(() => { stopped = true; clearTimeout(timer); });
  async function poll() {
    timer = null;
    const tracked = state.documents.filter((doc) => IN_FLIGHT.has(doc.status));
    if (!tracked.length || stopped) return;
    try {
      const [pending, processing] = await Promise.all(["pending", "processing"].map((status) => api.get(paths.documents(kb.id) + "?status=" + status)));
      const inFlight = new Map([...pending, ...processing].map((doc) => [doc.id, doc]));
      const settled = await Promise.all(tracked.filter((doc) => !inFlight.has(doc.id)).map((doc) => api.get(paths.document(kb.id, doc.id)).catch(() => null)));
      for (const doc of [...inFlight.values(), ...settled.filter(Boolean)]) upsert(doc);
      refreshFilterChoices();
      renderList();
      renderUploads();
    } catch (err) { /* the next poll tries again */ }
    schedule();
  }
  function schedule() { if (!timer && !stopped) timer = setTimeout(poll, POLL_MS); }
  function upsert(doc) {
    const index = state.documents.findIndex((known) => known.id === doc.id);
    if (index >= 0) state.documents[index] = doc; else state.documents.push(doc);
  }

  function renderUploads() {
    uploadsArea.replaceChildren(...state.uploads.map((item) => {
      const doc = item.documentId ? state.documents.find((known) => known.id === item.documentId) : null;
      const status = item.error ? "failed" : doc ? doc.status : "uploading";
      return el("li", { class: "upload-item status-" + status }, [
        el("span", { class: "upload-name", text: item.file.name }),
        el("span", { class: "muted small", text: bytes(item.file.size) }),
        progressBar(item.loaded, item.file.size || 1, t("doc.uploadProgress", { name: item.file.name })),
        badge(status),
        item.error ? el("span", { class: "reason", text: item.error }) : null,
        doc && doc.status === "failed" && doc.error ? el("span", { class: "reason", text: doc.error }) : null,
      ]);
    }));
    uploadsArea.hidden = state.uploads.length === 0;
  }

  const labelsInput = input({ placeholder: t("doc.labelsPlaceholder") });
  const docTypeInput = select([["knowledge", t("doc.knowledge")], ["reference", t("doc.reference")]], "knowledge");
  const fileInput = input({ type: "file", multiple: true, class: "sr-only", id: "file-input" });
  async function uploadAll(files) {
    const labels = splitList(labelsInput.value, /,/);
    const items = [...files].map((file) => ({ file, loaded: 0, documentId: null, error: null }));
    state.uploads.unshift(...items);
    renderUploads();
    const queue = [...items];
    async function worker() {
      for (let item = queue.shift(); item; item = queue.shift()) {
        const form = new FormData();
        form.append("file", item.file, item.file.name);
        if (labels.length) form.append("labels", JSON.stringify(labels));
        form.append("doc_type", docTypeInput.value);
        try {
          const doc = await upload(paths.documents(kb.id), form, (loaded) => { item.loaded = loaded; renderUploads(); });
          item.loaded = item.file.size;
          item.documentId = doc.id;
          upsert(doc);
        } catch (err) {
          item.error = (err.problem && err.problem.detail) || err.message;
        }
        renderUploads();
      }
    }
    await Promise.all(Array.from({ length: Math.min(PARALLEL_UPLOADS, items.length) }, worker));
    refreshFilterChoices();
    renderList();
    schedule();
  }
  fileInput.addEventListener("change", () => { if (fileInput.files.length) uploadAll(fileInput.files); fileInput.value = ""; });
  const dropZone = el("div", { class: "dropzone", id: "dropzone" }, [
    el("div", { class: "drop-icon", "aria-hidden": "true", text: "⇪" }),
    el("p", { class: "strong", text: t("doc.dropHere") }),
    el("p", { class: "muted small", text: t("doc.dropHint") }),
    el("label", { for: "file-input", class: "btn secondary", text: t("doc.chooseFiles"), tabindex: "0" }),
    fileInput,
  ]);
  dropZone.querySelector("label").addEventListener("keydown", (event) => { if (event.key === "Enter" || event.key === " ") { event.preventDefault(); fileInput.click(); } });
  for (const name of ["dragenter", "dragover"]) dropZone.addEventListener(name, (event) => { event.preventDefault(); dropZone.classList.add("over"); });
  for (const name of ["dragleave", "drop"]) dropZone.addEventListener(name, () => dropZone.classList.remove("over"));
  dropZone.addEventListener("drop", (event) => { event.preventDefault(); if (event.dataTransfer.files.length) uploadAll(event.dataTransfer.files); });

  for (const control of Object.values(filters)) control.addEventListener("input", () => { state.page = 0; renderList(); });
  refreshFilterChoices();
  renderList();
  renderUploads();
  schedule();

  const writable = canWrite(kb.id) && kb.status === "active";
  const failed = state.documents.filter((doc) => doc.status === "failed").length;
  return el("div", {}, [
    pageHeader(kb.name, kb.description || t("doc.lead"), [
      writable && failed ? button(t("doc.retryFailed", { n: failed }), async () => {
        try {
          const job = await api.post(paths.kb(kb.id) + "/retry-failed");
          toast(t("job.started", { kind: t("job.kind." + job.kind) }));
          ctx.navigate("/kbs/" + encodeURIComponent(kb.id) + "/jobs");
        } catch (err) { toast(err.message, "bad"); }
      }, "secondary") : null,
    ]),
    kb.status === "deleting" ? el("div", { class: "alert warn", text: t("kb.beingDeleted") }) : null,
    writable ? card(t("doc.upload"), [
      el("div", { class: "upload-options" }, [
        field(t("doc.labelsForUpload"), labelsInput, { hint: t("doc.labelsHint") }),
        field(t("doc.type"), docTypeInput),
      ]),
      dropZone,
      uploadsArea,
    ]) : null,
    card(t("nav.documents"), [
      el("div", { class: "filters" }, [
        field(t("search"), filters.text),
        field(t("doc.status"), filters.status),
        field(t("doc.labels"), filters.label),
        field(t("doc.type"), filters.docType),
        field(t("doc.format"), filters.format),
      ]),
      summary,
      listArea,
    ]),
  ]);

  function resetOptions(node, options) {
    const value = node.value;
    node.replaceChildren(...options.map(([optionValue, text]) => el("option", { value: optionValue, text })));
    node.value = options.some(([optionValue]) => optionValue === value) ? value : "";
  }
}

function labelChips(labels) {
  return labels.length ? el("span", { class: "chips" }, labels.map((label) => el("span", { class: "chip", text: label }))) : el("span", { class: "muted", text: "–" });
}

function countBy(items, key) {
  const counts = {};
  for (const item of items) counts[key(item)] = (counts[key(item)] || 0) + 1;
  return counts;
}

export async function documentView(ctx) {
  const kb = ctx.kb;
  const documentId = ctx.params[1];
  const doc = await api.get(paths.document(kb.id, documentId));
  const writable = canWrite(kb.id) && kb.status === "active";
  const base = "/console/kbs/" + encodeURIComponent(kb.id);
  const chunksArea = el("div");
  const facts = [
    [t("doc.sourceId"), el("span", { class: "mono", text: doc.source_id })],
    [t("doc.filename"), doc.filename || "–"],
    [t("doc.format"), el("span", { class: "mono", text: doc.media_type })],
    [t("doc.size"), bytes(doc.size_bytes)],
    [t("doc.type"), t("doc." + doc.doc_type)],
    [t("doc.labels"), labelChips(doc.labels)],
    [t("doc.version"), t("doc.versionValue", { version: doc.version, indexed: doc.indexed_version === null ? "–" : doc.indexed_version })],
    [t("doc.chunks"), number(doc.chunk_count)],
    [t("doc.attempts"), number(doc.attempts)],
    [t("doc.sha256"), el("span", { class: "mono small", text: doc.sha256 })],
    [t("created"), when(doc.created_at)],
    [t("updated"), when(doc.updated_at)],
    [t("doc.indexedAt"), when(doc.indexed_at)],
  ];
  if (Object.keys(doc.metadata || {}).length) facts.push([t("doc.metadata"), el("pre", { class: "json", text: JSON.stringify(doc.metadata, null, 2) })]);
  const timings = Object.entries(doc.stage_timings || {});

  async function showChunks(offset) {
    try {
      const page = await api.get(paths.document(kb.id, documentId) + "/chunks?limit=20&offset=" + offset);
      chunksArea.replaceChildren(
        el("p", { class: "muted", text: page.indexed_version === null ? t("doc.notIndexed") : t("doc.chunksOf", { from: page.total ? offset + 1 : 0, to: offset + page.chunks.length, total: page.total, version: page.indexed_version }) }),
        el("ol", { class: "chunks" }, page.chunks.map((chunk) => el("li", { class: "chunk" }, [
          el("div", { class: "chunk-meta" }, [
            el("span", { class: "chip", text: "#" + chunk.ordinal }),
            chunk.page ? el("span", { text: t("doc.page", { page: chunk.page }) }) : null,
            chunk.heading_path.length ? el("span", { class: "heading-path", text: chunk.heading_path.join(" › ") }) : null,
            el("span", { class: "mono small muted", text: t("doc.offsets", { start: chunk.char_start, end: chunk.char_end }) }),
          ]),
          el("p", { class: "chunk-text", text: chunk.text }),
        ]))),
        el("div", { class: "pager" }, [
          button(t("previous"), () => showChunks(Math.max(0, offset - 20)), "ghost small", { disabled: offset === 0 }),
          button(t("next"), () => showChunks(page.next_offset), "ghost small", { disabled: page.next_offset === null }),
        ]),
      );
    } catch (err) {
      chunksArea.replaceChildren(errorBox(err));
    }
  }
  showChunks(0);

  return el("div", {}, [
    pageHeader(doc.title || doc.source_id, null, [
      el("a", { class: "btn secondary", href: paths.document(kb.id, documentId) + "/original", download: "", text: t("doc.download") }),
      writable && doc.status === "failed" ? button(t("doc.retry"), async () => {
        try { await api.post(paths.document(kb.id, documentId) + "/retry"); toast(t("doc.retried")); ctx.navigate(base + "/documents/" + encodeURIComponent(documentId), true); } catch (err) { toast(err.message, "bad"); }
      }, "secondary") : null,
      writable ? button(t("delete"), async () => {
        if (!(await confirmDialog(t("doc.deleteTitle"), t("doc.deleteBody", { title: doc.title }), t("delete")))) return;
        try { await api.del(paths.document(kb.id, documentId)); toast(t("doc.deleted")); ctx.navigate(base + "/documents"); } catch (err) { toast(err.message, "bad"); }
      }, "danger") : null,
    ]),
    el("div", { class: "status-line" }, [badge(doc.status), link(base + "/documents", t("doc.back"))]),
    doc.status === "failed" ? el("div", { class: "alert error", role: "alert" }, [el("strong", { text: t("doc.failureReason") }), el("p", { class: "reason-text", text: doc.error || t("doc.noReason") })]) : null,
    el("div", { class: "two-col" }, [
      card(t("doc.details"), el("dl", { class: "facts" }, facts.flatMap(([name, value]) => [el("dt", { text: name }), el("dd", {}, value instanceof Node ? value : String(value))]))),
      card(t("doc.timings"), timings.length
        ? table([{ label: t("doc.stage"), render: ([stage]) => stage }, { label: "ms", class: "num", render: ([, ms]) => typeof ms === "number" ? number(ms, 1) : JSON.stringify(ms) }], timings, { compact: true })
        : el("p", { class: "muted", text: t("nothingYet") })),
    ]),
    card(t("doc.chunksTitle"), chunksArea),
  ]);
}
