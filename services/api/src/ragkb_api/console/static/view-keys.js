// API keys (admin): create (the key is shown once), grants per KB, search filters, revoke.
"use strict";

import { api, paths } from "./api.js";
import { t } from "./i18n.js";
import {
  badge, button, card, clearFieldErrors, confirmDialog, dialog, el, errorBox, field, input, pageHeader, select,
  showFieldErrors, splitList, table, toast, when,
} from "./dom.js";

export async function keysView(ctx) {
  const [keys, kbs] = await Promise.all([api.get(paths.keys), api.get(paths.kbs)]);
  const kbNames = new Map(kbs.map((kb) => [kb.id, kb.name]));
  const editor = el("div");
  const grantsText = (grants) => {
    const entries = Object.entries(grants || {});
    return entries.length ? el("ul", { class: "grant-list" }, entries.map(([kbId, permission]) => el("li", {}, [
      el("span", { text: kbNames.get(kbId) || kbId }), " ", badge(permission === "write" ? "processing" : "muted", t("key.perm." + permission)),
    ]))) : el("span", { class: "muted", text: "–" });
  };
  const filterText = (filter) => {
    if (!filter) return el("span", { class: "muted", text: "–" });
    const parts = [];
    if (filter.labels_any) parts.push(t("key.labelsAny") + ": " + filter.labels_any.join(", "));
    if (filter.doc_types) parts.push(t("doc.type") + ": " + filter.doc_types.map((type) => t("doc." + type)).join(", "));
    return el("span", { class: "small", text: parts.join(" · ") || "–" });
  };
  const list = table([
    { label: t("key.name"), render: (key) => el("div", {}, [el("span", { class: "strong", text: key.name }), el("div", { class: "muted small mono", text: "rk_" + key.prefix + "_…" })]) },
    { label: t("key.role"), render: (key) => t("role." + key.role) },
    { label: t("key.grants"), render: (key) => key.role === "admin" ? el("span", { class: "muted", text: t("key.allKbs") }) : grantsText(key.grants) },
    { label: t("key.filter"), render: (key) => filterText(key.search_filter) },
    { label: t("kb.status"), render: (key) => key.revoked_at ? badge("revoked", t("key.revokedAt", { when: when(key.revoked_at) })) : badge("active") },
    { label: t("created"), class: "date", render: (key) => when(key.created_at) },
    { label: t("actions"), render: (key) => key.revoked_at ? null : el("div", { class: "row-actions" }, [
      key.role === "client" ? button(t("edit"), () => editor.replaceChildren(keyForm(ctx, kbs, key, () => editor.replaceChildren())), "ghost small") : null,
      button(t("key.revoke"), async () => {
        if (!(await confirmDialog(t("key.revokeTitle"), t("key.revokeBody", { name: key.name }), t("key.revoke")))) return;
        try { await api.del(paths.key(key.id)); toast(t("key.revoked", { name: key.name })); ctx.navigate("/keys", true); } catch (err) { toast(err.message, "bad"); }
      }, "ghost small danger-text"),
    ]) },
  ], keys, { caption: t("nav.keys") });
  return el("div", {}, [
    pageHeader(t("nav.keys"), t("key.lead"), [button(t("key.new"), () => editor.replaceChildren(keyForm(ctx, kbs, null, () => editor.replaceChildren())), "primary")]),
    editor,
    card(null, list),
  ]);
}

// Creating a key (existing: null) or changing a client key's grants and search filter.
function keyForm(ctx, kbs, existing, close) {
  const name = input({ required: true, maxlength: 200, value: existing ? existing.name : "", disabled: Boolean(existing) });
  const role = select([["client", t("role.client")], ["admin", t("role.admin")]], existing ? existing.role : "client", { disabled: Boolean(existing) });
  const grants = existing ? Object.assign({}, existing.grants) : {};
  const grantRows = el("div", { class: "grant-rows" });
  const drawGrants = () => grantRows.replaceChildren(...kbs.map((kb) => {
    const choice = select([["", t("key.perm.none")], ["read", t("key.perm.read")], ["write", t("key.perm.write")]], grants[kb.id] || "", { "aria-label": t("key.grantFor", { kb: kb.name }) });
    choice.addEventListener("change", () => { if (choice.value) grants[kb.id] = choice.value; else delete grants[kb.id]; });
    return el("div", { class: "grant-row" }, [el("span", { text: kb.name }), choice]);
  }));
  drawGrants();
  const filter = existing && existing.search_filter ? existing.search_filter : {};
  const labels = input({ value: (filter.labels_any || []).join(", "), placeholder: t("doc.labelsPlaceholder") });
  const knowledge = input({ type: "checkbox", checked: (filter.doc_types || []).includes("knowledge") });
  const reference = input({ type: "checkbox", checked: (filter.doc_types || []).includes("reference") });
  const clientOnly = el("div", { class: "client-only" }, [
    el("fieldset", {}, [el("legend", { text: t("key.grants") }), el("p", { class: "muted small", text: t("key.grantsLead") }), grantRows,
      el("small", { class: "field-error", "data-error-for": "grants", role: "alert" })]),
    el("fieldset", {}, [el("legend", { text: t("key.filter") }), el("p", { class: "muted small", text: t("key.filterLead") }), el("div", { class: "form-grid" }, [
      field(t("key.labelsAny"), labels, { name: "search_filter.labels_any" }),
      field(t("doc.knowledge"), knowledge),
      field(t("doc.reference"), reference),
    ])]),
  ]);
  role.addEventListener("change", () => { clientOnly.hidden = role.value === "admin"; });
  const problem = el("div");
  const form = el("form", { class: "stack" }, [
    el("div", { class: "form-grid" }, [field(t("key.name"), name, { name: "name" }), field(t("key.role"), role, { name: "role" })]),
    clientOnly,
    problem,
    el("div", { class: "actions" }, [button(t("cancel"), close, "ghost"), el("button", { type: "submit", class: "btn primary", text: existing ? t("save") : t("key.create") })]),
  ]);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearFieldErrors(form);
    problem.replaceChildren();
    const labelList = splitList(labels.value, /,/);
    const docTypes = [knowledge.checked ? "knowledge" : null, reference.checked ? "reference" : null].filter(Boolean);
    const searchFilter = labelList.length || docTypes.length ? { labels_any: labelList.length ? labelList : null, doc_types: docTypes.length ? docTypes : null } : null;
    try {
      if (existing) {
        await api.patch(paths.key(existing.id), { grants, search_filter: searchFilter });
        toast(t("key.updated", { name: existing.name }));
        ctx.navigate("/keys", true);
        return;
      }
      const body = role.value === "admin" ? { name: name.value, role: "admin" } : { name: name.value, role: "client", grants, search_filter: searchFilter };
      const created = await api.post(paths.keys, body);
      showOnce(created, () => ctx.navigate("/keys", true));
    } catch (err) {
      const rest = showFieldErrors(form, err.fieldErrors ? err.fieldErrors() : {});
      if (rest.length || !Object.keys(err.fieldErrors ? err.fieldErrors() : {}).length) problem.replaceChildren(errorBox(err));
    }
  });
  return card(existing ? t("key.editTitle", { name: existing.name }) : t("key.new"), form);
}

// The new key, once: it is not stored anywhere the console or the server could show it again.
function showOnce(created, done) {
  const value = input({ value: created.key, readonly: true, class: "mono secret", id: "new-key" });
  const copy = button(t("key.copy"), async () => {
    try { await navigator.clipboard.writeText(created.key); copy.textContent = t("key.copied"); } catch (err) { value.select(); }
  }, "secondary");
  const node = dialog(t("key.createdTitle", { name: created.name }), el("div", { class: "stack" }, [
    el("div", { class: "alert warn", text: t("key.shownOnce") }),
    el("div", { class: "copy-row" }, [field(t("key.theKey"), value), copy]),
  ]), [button(t("key.saved"), () => node.close(), "primary")]);
  node.addEventListener("close", () => { value.value = ""; done(); });
}
