// The console's shell: session, language, navigation and the router of /console/... views.
"use strict";

import { api, currentSession, isAdmin, loadSession, paths, setSignedOutHandler, signIn, signOut, ApiError } from "./api.js";
import { applyStaticTexts, lang, setLang, t } from "./i18n.js";
import { el, errorBox, field, input, link } from "./dom.js";
import { kbListView } from "./view-kbs.js";
import { documentsView, documentView } from "./view-documents.js";
import { jobsView } from "./view-jobs.js";
import { searchView, searchChooserView } from "./view-search.js";
import { evaluationsView } from "./view-evaluations.js";
import { keysView } from "./view-keys.js";
import { settingsView } from "./view-settings.js";

const BASE = "/console";
const KB_TABS = [
  ["documents", "nav.documents"], ["jobs", "nav.jobs"], ["search", "nav.search"],
  ["evaluations", "nav.evaluations"], ["settings", "nav.settings"],
];
const ROUTES = [
  [/^\/signin$/, () => signInView],
  [/^\/kbs$/, () => kbListView],
  [/^\/kbs\/([^/]+)$/, () => documentsView, "documents"],
  [/^\/kbs\/([^/]+)\/documents$/, () => documentsView, "documents"],
  [/^\/kbs\/([^/]+)\/documents\/([^/]+)$/, () => documentView, "documents"],
  [/^\/kbs\/([^/]+)\/jobs$/, () => jobsView, "jobs"],
  [/^\/kbs\/([^/]+)\/search$/, () => searchView, "search"],
  [/^\/kbs\/([^/]+)\/evaluations$/, () => evaluationsView, "evaluations"],
  [/^\/kbs\/([^/]+)\/settings$/, () => settingsView, "settings"],
  [/^\/search$/, () => searchChooserView],
  [/^\/keys$/, () => keysView],
];

let leaving = [];
let renderCount = 0;

export function navigate(path, replace) {
  const target = path.startsWith(BASE) ? path : BASE + path;
  if (replace) history.replaceState(null, "", target);
  else history.pushState(null, "", target);
  render();
}

function routeOf(pathname) {
  const rest = pathname.slice(BASE.length).replace(/\/+$/, "") || "/kbs";
  for (const [pattern, view, tab] of ROUTES) {
    const match = rest.match(pattern);
    if (match) return { view: view(), params: match.slice(1).map(decodeURIComponent), tab, path: rest };
  }
  return null;
}

async function render() {
  const count = ++renderCount;
  for (const stop of leaving) { try { stop(); } catch (err) { /* a view's cleanup never blocks the next */ } }
  leaving = [];
  const main = document.getElementById("main");
  const route = routeOf(location.pathname);
  if (!currentSession() && (!route || route.view !== signInView)) {
    navigate("/signin?next=" + encodeURIComponent(location.pathname), true);
    return;
  }
  renderChrome(route);
  if (!route) {
    main.replaceChildren(el("h1", { text: t("notFound") }), link(BASE + "/kbs", t("nav.kbs")));
    return;
  }
  main.setAttribute("aria-busy", "true");
  const ctx = {
    params: route.params,
    query: new URLSearchParams(location.search),
    onLeave: (stop) => leaving.push(stop),
    navigate,
    isCurrent: () => count === renderCount,
  };
  let content;
  try {
    if (route.tab) ctx.kb = await api.get(paths.kb(route.params[0]));
    content = await route.view(ctx);
  } catch (err) {
    content = el("div", {}, [el("h1", { text: t("error") }), errorBox(err)]);
  }
  if (count !== renderCount) return;
  const page = route.tab ? kbFrame(ctx.kb, route.tab, content) : content;
  main.replaceChildren(page);
  main.removeAttribute("aria-busy");
  document.title = (route.tab && ctx.kb ? ctx.kb.name + " · " : "") + t("title");
}

function kbFrame(kb, active, content) {
  if (!kb) return content;
  const tabs = el("nav", { class: "tabs", "aria-label": t("kbSections") }, KB_TABS.map(([tab, label]) =>
    link(BASE + "/kbs/" + encodeURIComponent(kb.id) + "/" + tab, t(label), { class: tab === active ? "tab active" : "tab", "aria-current": tab === active ? "page" : null })));
  return el("div", { class: "kb-frame" }, [
    el("div", { class: "crumbs" }, [link(BASE + "/kbs", t("nav.kbs")), el("span", { "aria-hidden": "true", text: "/" }), el("span", { text: kb.name })]),
    tabs,
    content,
  ]);
}

function renderChrome(route) {
  const session = currentSession();
  document.getElementById("who").textContent = session ? t("signedInAs", { label: session.key_id === "bootstrap" ? t("bootstrapKey") : session.label, role: t("role." + session.role) }) : "";
  document.getElementById("signout").hidden = !session;
  const nav = document.getElementById("nav");
  document.body.classList.toggle("signed-out", !session);
  if (!session) { nav.replaceChildren(); return; }
  const here = route ? route.path : "";
  const item = (href, label, active) => el("li", {}, link(BASE + href, label, { class: active ? "active" : null, "aria-current": active ? "page" : null }));
  nav.replaceChildren(el("ul", {}, [
    item("/kbs", t("nav.kbs"), here.startsWith("/kbs")),
    item("/search", t("nav.search"), here === "/search"),
    isAdmin() ? item("/keys", t("nav.keys"), here === "/keys") : null,
  ]));
}

function signInView(ctx) {
  const key = input({ type: "password", autocomplete: "current-password", required: true, name: "key" });
  const problem = el("div");
  const submit = el("button", { type: "submit", class: "btn primary", text: t("signIn") });
  const form = el("form", { class: "signin-form" }, [
    field(t("apiKey"), key, { hint: t("apiKeyHint") }),
    problem,
    submit,
  ]);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    problem.replaceChildren();
    submit.disabled = true;
    try {
      await signIn(key.value.trim());
      key.value = "";
      const next = ctx.query.get("next");
      navigate(next && next.startsWith(BASE + "/") && !next.startsWith(BASE + "/signin") ? next : "/kbs", true);
    } catch (err) {
      problem.replaceChildren(errorBox(err instanceof ApiError ? err : new ApiError(0, { detail: String(err) })));
      submit.disabled = false;
    }
  });
  return el("div", { class: "signin" }, [
    el("div", { class: "signin-card" }, [
      el("h1", { text: t("signInTitle") }),
      el("p", { class: "subtitle", text: t("signInLead") }),
      form,
      el("p", { class: "fineprint", text: t("signInFineprint") }),
    ]),
  ]);
}

async function boot() {
  const chooser = document.getElementById("lang");
  chooser.value = lang();
  chooser.addEventListener("change", () => { setLang(chooser.value); applyStaticTexts(); render(); });
  applyStaticTexts();
  document.getElementById("signout").addEventListener("click", async () => {
    await signOut();
    navigate("/signin", true);
  });
  setSignedOutHandler(() => navigate("/signin?next=" + encodeURIComponent(location.pathname), true));
  document.addEventListener("click", (event) => {
    const anchor = event.target.closest("a[href]");
    if (!anchor || anchor.target || anchor.hasAttribute("download") || event.ctrlKey || event.metaKey || event.shiftKey) return;
    const url = new URL(anchor.href);
    if (url.origin !== location.origin || !url.pathname.startsWith(BASE)) return;
    event.preventDefault();
    navigate(url.pathname + url.search);
  });
  window.addEventListener("popstate", render);
  try {
    await loadSession();
  } catch (err) {
    document.getElementById("main").replaceChildren(errorBox(err));
    return;
  }
  render();
}

boot();
