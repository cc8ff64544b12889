// The dashboard's shell: sign-in, the API client, the router and the page it shows. Plain
// modules, no build step. The token lives in sessionStorage (this tab only, gone when it closes)
// and travels as the Authorization header: no cookie, so no request is made with the person's
// rights unless this code makes it.
import { h, clear } from "./dom.js";
import { clusterPage } from "./pages/cluster.js";
import { queuePage } from "./pages/queue.js";
import { jobPage } from "./pages/job.js";
import { nodesPage } from "./pages/nodes.js";
import { budgetsPage } from "./pages/budgets.js";
import { mePage } from "./pages/me.js";

const TOKEN_KEY = "allot.token";
const REFRESH_MS = 5000;

export class ApiError extends Error {
  constructor(status, field, reason) {
    super(`${status}${field ? " " + field : ""}: ${reason}`);
    this.status = status;
  }
}

// GET (or, with a body, POST) an API path under /api/v1: the Response, or ApiError.
export async function apiResponse(path, body) {
  const init = { headers: { Authorization: "Bearer " + sessionStorage.getItem(TOKEN_KEY) } };
  if (body !== undefined) {
    init.method = "POST";
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch("/api/v1" + path, init);
  if (!res.ok) {
    const type = res.headers.get("Content-Type") || "";
    const e = type.includes("json") ? (await res.json()).error : { reason: await res.text() };
    if (res.status === 401) signOut(e.reason);
    throw new ApiError(res.status, e.field, e.reason);
  }
  return res;
}
// The same, read: parsed JSON, or text for a text answer (logs).
export async function api(path, body) {
  const res = await apiResponse(path, body);
  return (res.headers.get("Content-Type") || "").includes("json") ? res.json() : res.text();
}

// Answers that cost the server a scan of history (/report, /usage over 100,000 jobs take
// seconds): kept for maxAgeMs, and shared while in flight, so that the 5 s refresh does not
// pile requests up behind one another.
const slow = new Map();
export function cached(key, maxAgeMs, path) {
  const c = slow.get(key);
  if (c && performance.now() - c.at < maxAgeMs) return c.answer;
  const answer = api(path);
  slow.set(key, { at: performance.now(), answer });
  answer.catch(() => slow.delete(key));
  return answer;
}

// The signed-in principal (GET /whoami), read once per sign-in.
let whoami = null;
export const me = () => whoami;

const routes = [
  [/^\/$/, "cluster", clusterPage],
  [/^\/queue$/, "queue", queuePage],
  [/^\/jobs\/(\d+)$/, "queue", jobPage],
  [/^\/nodes$/, "nodes", nodesPage],
  [/^\/budgets$/, "budgets", budgetsPage],
  [/^\/me$/, "me", mePage],
];

let timer = null;
let shown = 0; // bumped per navigation: a slow answer for a page left behind is dropped

async function show() {
  clearTimeout(timer);
  const main = document.getElementById("main");
  if (!sessionStorage.getItem(TOKEN_KEY)) return signInForm(main);
  if (!whoami) {
    try {
      whoami = await api("/whoami");
    } catch (e) {
      return; // a 401 already showed the sign-in form
    }
    document.getElementById("who").textContent = `${whoami.subject} (${whoami.role})`;
    document.getElementById("signout").hidden = false;
  }
  const path = location.pathname;
  const route = routes.find(([re]) => re.test(path));
  for (const a of document.querySelectorAll("#nav a")) {
    a.classList.toggle("current", route && a.dataset.page === route[1]);
  }
  if (!route) {
    clear(main).append(h("h1", {}, "No such page"), h("p", {}, h("a", { href: "/" }, "Cluster")));
    return;
  }
  const ticket = ++shown;
  const render = async (first) => {
    try {
      const view = await route[2](path.match(route[0]), new URLSearchParams(location.search));
      if (ticket !== shown) return;
      // A refresh keeps what the person typed or scrolled to: only the data part is replaced.
      const focusKeep = !first && main.contains(document.activeElement);
      if (!focusKeep) clear(main).append(view);
    } catch (e) {
      if (ticket !== shown || !sessionStorage.getItem(TOKEN_KEY)) return;
      clear(main).append(h("h1", {}, "Could not load this page"), h("p", { class: "error" },
        String(e.message)));
    }
    if (ticket === shown) timer = setTimeout(() => render(false), REFRESH_MS);
  };
  await render(true);
}

function signInForm(main, why) {
  const input = h("input", { type: "password", id: "token", autocomplete: "off",
    placeholder: "allot_…", "aria-label": "API token" });
  const form = h("form", { class: "signin" },
    h("h1", {}, "Sign in"),
    h("p", {}, "Paste an API token (", h("code", {}, "allot token create"), ", or the admin " +
      "token `allot server` printed). It is kept in this tab only and sent with each request."),
    why ? h("p", { class: "error" }, why) : "",
    input, h("button", { type: "submit", id: "signin" }, "Sign in"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    whoami = null;
    show();
  });
  clear(main).append(form);
  input.focus();
}

function signOut(why) {
  sessionStorage.removeItem(TOKEN_KEY);
  slow.clear();
  whoami = null;
  clearTimeout(timer);
  ++shown;
  document.getElementById("who").textContent = "";
  document.getElementById("signout").hidden = true;
  signInForm(document.getElementById("main"), why);
}

// Links inside the app change the page without reloading it.
export function go(url) {
  history.pushState(null, "", url);
  show();
}
document.addEventListener("click", (ev) => {
  const a = ev.target.closest("a");
  if (!a || a.origin !== location.origin || ev.ctrlKey || ev.metaKey || a.target) return;
  ev.preventDefault();
  go(a.pathname + a.search);
});
window.addEventListener("popstate", show);
document.getElementById("signout").addEventListener("click", () => signOut());
show();
