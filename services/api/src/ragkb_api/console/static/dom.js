// Building the page: every node is made here and every piece of data goes in as text (textContent or an
// attribute value), never as markup.
"use strict";

import { t, lang } from "./i18n.js";

export function el(tag, attrs, children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") node.textContent = String(value);
    else if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (value === true) node.setAttribute(name, "");
    else node.setAttribute(name, String(value));
  }
  for (const child of [].concat(children || [])) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function svg(tag, attrs, children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (name === "text") node.textContent = String(value);
    else node.setAttribute(name, String(value));
  }
  for (const child of [].concat(children || [])) if (child) node.append(child);
  return node;
}

let uid = 0;
export function nextId(prefix) { uid += 1; return (prefix || "f") + "-" + uid; }

// A labelled form field. `name` is the API's field path ("chunking.max_tokens"): server validation errors
// for that path are shown beside it (showFieldErrors).
export function field(label, control, options) {
  const opts = options || {};
  const id = control.id || nextId("field");
  control.id = id;
  const hintId = opts.hint ? id + "-hint" : null;
  const errorId = id + "-error";
  if (opts.name) control.dataset.field = opts.name;
  control.setAttribute("aria-describedby", [hintId, errorId].filter(Boolean).join(" "));
  return el("div", { class: "field" + (opts.wide ? " wide" : "") + (control.type === "checkbox" ? " check" : "") }, [
    control.type === "checkbox" ? el("label", { for: id }, [control, el("span", { text: label })]) : el("label", { for: id, text: label }),
    control.type === "checkbox" ? null : control,
    opts.hint ? el("small", { id: hintId, class: "hint", text: opts.hint }) : null,
    el("small", { id: errorId, class: "field-error", "data-error-for": opts.name || "", role: "alert" }),
  ]);
}

export function input(attrs) { return el("input", Object.assign({ type: "text" }, attrs)); }

export function select(options, value, attrs) {
  const node = el("select", attrs);
  for (const option of options) {
    const [optionValue, text] = Array.isArray(option) ? option : [option, option];
    node.append(el("option", { value: optionValue, text, selected: String(optionValue) === String(value) }));
  }
  return node;
}

export function button(text, onclick, kind, attrs) {
  return el("button", Object.assign({ type: "button", class: "btn " + (kind || ""), text, onclick }, attrs || {}));
}

export function clearFieldErrors(form) {
  for (const node of form.querySelectorAll(".field-error")) node.textContent = "";
  for (const node of form.querySelectorAll("[aria-invalid]")) node.removeAttribute("aria-invalid");
}

// Puts each validation error beside its field (or the nearest enclosing one: "chunking" for a model-level
// error of the chunking group); returns the messages that found no field.
export function showFieldErrors(form, errors) {
  const unplaced = [];
  for (const [path, message] of Object.entries(errors)) {
    let target = null;
    for (let parts = path.split("."); parts.length && !target; parts.pop()) {
      target = form.querySelector('[data-error-for="' + CSS.escape(parts.join(".")) + '"]');
    }
    if (!target) { unplaced.push(path + ": " + message); continue; }
    target.textContent = message;
    const control = form.querySelector('[data-field="' + CSS.escape(target.dataset.errorFor) + '"]');
    if (control) control.setAttribute("aria-invalid", "true");
  }
  return unplaced;
}

export function errorBox(error) {
  const problem = (error && error.problem) || {};
  const lines = [];
  for (const item of Array.isArray(problem.errors) ? problem.errors : []) {
    const path = item.key || (Array.isArray(item.loc) ? item.loc.join(".") : "");
    lines.push((path ? path + ": " : "") + (item.message || item.msg || ""));
  }
  return el("div", { class: "alert error", role: "alert" }, [
    el("strong", { text: (problem.title || t("error")) + (error && error.status ? " (" + error.status + ")" : "") }),
    el("div", { text: problem.detail || (error && error.message) || "" }),
    lines.length ? el("ul", {}, lines.map((line) => el("li", { text: line }))) : null,
  ]);
}

export function toast(message, kind) {
  const box = document.getElementById("toasts");
  const node = el("div", { class: "toast " + (kind || "ok"), text: message });
  box.append(node);
  setTimeout(() => node.remove(), 3500);
}

// A modal confirmation built on <dialog>; resolves true when confirmed. `typed`: a word to type first.
export function confirmDialog(title, message, confirmText, typed) {
  return new Promise((resolve) => {
    const check = typed ? input({ autocomplete: "off" }) : null;
    const ok = button(confirmText || t("confirm"), null, "danger");
    const dialog = el("dialog", { class: "dialog", "aria-labelledby": "dialog-title" }, [
      el("h2", { id: "dialog-title", text: title }),
      el("p", { text: message }),
      check ? field(t("typeToConfirm", { word: typed }), check) : null,
      el("div", { class: "actions" }, [button(t("cancel"), () => dialog.close("cancel"), "ghost"), ok]),
    ]);
    if (check) {
      ok.disabled = true;
      check.addEventListener("input", () => { ok.disabled = check.value !== typed; });
    }
    ok.addEventListener("click", () => dialog.close("ok"));
    dialog.addEventListener("close", () => { dialog.remove(); resolve(dialog.returnValue === "ok"); });
    document.body.append(dialog);
    dialog.showModal();
  });
}

export function dialog(title, body, actions) {
  const node = el("dialog", { class: "dialog wide", "aria-labelledby": "dialog-title" }, [
    el("h2", { id: "dialog-title", text: title }), body, el("div", { class: "actions" }, actions || []),
  ]);
  node.addEventListener("close", () => node.remove());
  document.body.append(node);
  node.showModal();
  return node;
}

const STATUS_KIND = {
  done: "ok", succeeded: "ok", active: "ok", passed: "ok",
  failed: "bad", cancelled: "muted", revoked: "muted",
  processing: "info", running: "info", uploading: "info",
  pending: "muted", queued: "muted",
  deleting: "warn", skipped: "warn",
};

export function badge(status, text) {
  return el("span", { class: "badge " + (STATUS_KIND[status] || "muted"), text: text || t("status." + status, {}, status) });
}

export function progressBar(current, total, label) {
  const bar = el("progress", { max: Math.max(total || 0, 1), value: Math.min(current || 0, Math.max(total || 0, 1)), "aria-label": label });
  return bar;
}

export function bytes(size) {
  if (size === null || size === undefined) return "–";
  const units = ["B", "KB", "MB", "GB"];
  let value = size;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
  return (unit ? value.toFixed(1) : String(value)) + " " + units[unit];
}

export function number(value, digits) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  return new Intl.NumberFormat(lang(), { maximumFractionDigits: digits === undefined ? 0 : digits, minimumFractionDigits: digits || 0 }).format(value);
}

export function when(iso) {
  if (!iso) return "–";
  return new Intl.DateTimeFormat(lang(), { dateStyle: "medium", timeStyle: "short" }).format(new Date(iso));
}

export function table(columns, rows, options) {
  const opts = options || {};
  const head = el("thead", {}, el("tr", {}, columns.map((column) => el("th", { scope: "col", class: column.class, text: column.label }))));
  const body = el("tbody", {}, rows.length
    ? rows.map((row) => el("tr", { class: opts.rowClass ? opts.rowClass(row) : null }, columns.map((column) => {
      const value = column.render(row);
      return el("td", { class: column.class }, value instanceof Node ? value : (value === null || value === undefined ? "–" : String(value)));
    })))
    : el("tr", {}, el("td", { colspan: columns.length, class: "empty", text: opts.empty || t("nothingYet") })));
  return el("div", { class: "table-wrap" }, el("table", { class: "grid" + (opts.compact ? " compact" : "") }, [
    opts.caption ? el("caption", { class: "sr-only", text: opts.caption }) : null, head, body,
  ]));
}

export function card(title, children, actions) {
  return el("section", { class: "card" }, [
    title || actions ? el("div", { class: "card-head" }, [title ? el("h2", { text: title }) : el("span"), el("div", { class: "card-actions" }, actions || [])]) : null,
    ...[].concat(children || []),
  ]);
}

export function pageHeader(title, subtitle, actions) {
  return el("div", { class: "page-head" }, [
    el("div", {}, [el("h1", { text: title }), subtitle ? el("p", { class: "subtitle", text: subtitle }) : null]),
    el("div", { class: "page-actions" }, actions || []),
  ]);
}

export function splitList(text, pattern) {
  return String(text || "").split(pattern || /[\n,]+/).map((item) => item.trim()).filter(Boolean);
}

export function short(text, limit) {
  const flat = String(text || "").replace(/\s+/g, " ").trim();
  return flat.length > limit ? flat.slice(0, limit - 1) + "…" : flat;
}

export function link(href, text, attrs) { return el("a", Object.assign({ href, text }, attrs || {})); }
