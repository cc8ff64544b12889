// The dashboard's shell: sign-in, the API client, the router and the page it shows. TypeScript,
// bundled with uPlot into web/app.js by esbuild (web/build.mjs, scripts/web-build). The token
// lives in sessionStorage (this tab only, gone when it closes) and travels as the Authorization
// header: no cookie, so no request is made with the person's rights unless this code makes it.
import { h, clear } from "./dom";
import { destroyCharts } from "./charts";
import { clusterPage } from "./pages/cluster";
import { queuePage } from "./pages/queue";
import { jobPage } from "./pages/job";
import { nodesPage } from "./pages/nodes";
import { budgetsPage } from "./pages/budgets";
import { mePage } from "./pages/me";
import type { Report } from "./types";

const TOKEN_KEY = "allot.token";
const REFRESH_MS = 5000; // without the event stream: every page polls this often
// With it, a page reads again when something it shows changed (GET /events/stream names jobs,
// nodes or budgets), and otherwise this often (telemetry and usage come without an event).
const LIVE_REFRESH_MS = 30000;

export class ApiError extends Error {
  status: number;
  constructor(status: number, field: string | undefined, reason: string) {
    super(`${status}${field ? " " + field : ""}: ${reason}`);
    this.status = status;
  }
}

// GET (or, with a body, POST) an API path under /api/v1: the Response, or ApiError.
export async function apiResponse(path: string, body?: unknown): Promise<Response> {
  const headers: Record<string, string> = {
    Authorization: "Bearer " + sessionStorage.getItem(TOKEN_KEY) };
  const init: RequestInit = { headers };
  if (body !== undefined) {
    init.method = "POST";
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch("/api/v1" + path, init);
  if (!res.ok) {
    const type = res.headers.get("Content-Type") || "";
    const e: { field?: string; reason: string } = type.includes("json")
      ? (await res.json()).error : { reason: await res.text() };
    if (res.status === 401) signOut(e.reason);
    throw new ApiError(res.status, e.field, e.reason);
  }
  return res;
}
// The same, read: parsed JSON (typed by the caller: src/types.ts has the API's answers), or text
// for a text answer (logs).
export async function api<T = any>(path: string, body?: unknown): Promise<T> {
  const res = await apiResponse(path, body);
  return (res.headers.get("Content-Type") || "").includes("json") ? res.json() : (res.text() as Promise<T>);
}

// Answers that cost the server a scan of history (/report, /standing, /advice over 100,000
// jobs take seconds): kept for maxAgeMs, and shared while in flight, so that the 5 s refresh
// does not pile requests up behind one another.
const slow = new Map<string, { at: number; answer: Promise<unknown> }>();
export function cached<T>(key: string, maxAgeMs: number, path: string): Promise<T> {
  const c = slow.get(key);
  if (c && performance.now() - c.at < maxAgeMs) return c.answer as Promise<T>;
  const answer = api<T>(path);
  slow.set(key, { at: performance.now(), answer });
  answer.catch(() => slow.delete(key));
  return answer;
}

// The last 7 days' report with a step a day (GET /report?step=86400: the whole week and each
// day, from one read of the history), shared by the pages, read at most once in 5 minutes.
export const weekReport = (): Promise<Report> =>
  cached<Report>("report-week", 300000, "/report?step=86400");

// The signed-in principal (GET /whoami), read once per sign-in.
export interface Whoami { subject: string; role: string; scope?: string }
let whoami: Whoami | null = null;
export const me = (): Whoami => whoami!;

// Path, nav entry, page, the topics of the event stream that change what it shows, and how
// often it reads again while the stream is open (a job's telemetry comes without an event).
type Page = (m: RegExpMatchArray, params: URLSearchParams) => Promise<Node>;
const routes: [RegExp, string, Page, string[], number?][] = [
  [/^\/$/, "cluster", clusterPage, ["jobs", "nodes", "budgets"]],
  [/^\/queue$/, "queue", queuePage, ["jobs", "budgets"]],
  [/^\/jobs\/(\d+)$/, "queue", jobPage, ["jobs", "nodes"], 10000],
  [/^\/nodes$/, "nodes", nodesPage, ["jobs", "nodes"]],
  [/^\/budgets$/, "budgets", budgetsPage, ["jobs", "budgets"]],
  [/^\/me$/, "me", mePage, ["jobs", "budgets"]],
];

let timer: ReturnType<typeof setTimeout> | undefined;
let shown = 0; // bumped per navigation: a slow answer for a page left behind is dropped
let current: { topics: string[]; changed: () => void } | null = null; // the page shown

// Live updates: GET /api/v1/events/stream read with fetch() (EventSource cannot send the
// Authorization header), one "changed" message per change naming its topics. While it is open
// the page refreshes on the changes it shows; when it fails the pages poll, and it is tried
// again (1 s, doubling up to a minute).
let stream: AbortController | null = null; // the AbortController of the open (or opening) stream
let live = false;
let retryMs = 1000;
let opened = 0; // streams opened in this tab
export const isLive = () => live;

function setLive(on: boolean): void {
  live = on;
  const el = document.getElementById("live")!;
  el.textContent = on ? "live" : "polling";
  el.className = on ? "live" : "polling";
  el.title = on ? "updates are pushed as they happen" : `refreshing every ${REFRESH_MS / 1000} s`;
}

function onMessage(text: string): void {
  let event = "message";
  let data = "";
  for (const line of text.split("\n")) {
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) data += line.slice(5).trim();
  }
  if (event !== "changed" || !data) return; // a heartbeat (a comment) or the retry hint
  let topics: string[] = [];
  try {
    topics = JSON.parse(data).topics || [];
  } catch {
    return;
  }
  const page = current;
  if (page && topics.some((t) => page.topics.includes(t))) page.changed();
}

async function watch(): Promise<void> {
  if (stream || !sessionStorage.getItem(TOKEN_KEY)) return;
  const ctl = new AbortController();
  stream = ctl;
  try {
    const res = await fetch("/api/v1/events/stream", { signal: ctl.signal, headers: {
      Authorization: "Bearer " + sessionStorage.getItem(TOKEN_KEY), Accept: "text/event-stream" } });
    if (res.ok && res.body) {
      setLive(true);
      retryMs = 1000;
      // Its first message names every topic; the page just read everything, unless this stream
      // follows one that failed (then what changed in between is read now).
      let skip = ++opened === 1;
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value.replace(/\r\n?/g, "\n");
        for (let i: number; (i = buf.indexOf("\n\n")) >= 0;) {
          const m = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (skip && m.includes("event: changed")) skip = false;
          else onMessage(m);
        }
        if (buf.length > 65536) buf = ""; // no message is this long
      }
    }
  } catch {
    // Aborted (signed out) or the connection failed: poll until it opens again.
  }
  if (stream !== ctl) return;
  stream = null;
  const wasLive = live;
  setLive(false);
  if (wasLive && current) current.changed(); // polling takes over at once
  if (!sessionStorage.getItem(TOKEN_KEY)) return;
  setTimeout(watch, retryMs);
  retryMs = Math.min(retryMs * 2, 60000);
}

async function show(): Promise<void> {
  clearTimeout(timer);
  const main = document.getElementById("main")!;
  if (!sessionStorage.getItem(TOKEN_KEY)) return signInForm(main);
  if (!whoami) {
    try {
      whoami = await api("/whoami");
    } catch {
      return; // a 401 already showed the sign-in form
    }
    document.getElementById("who")!.textContent = `${whoami!.subject} (${whoami!.role})`;
    document.getElementById("signout")!.hidden = false;
  }
  const path = location.pathname;
  const route = routes.find(([re]) => re.test(path));
  for (const a of document.querySelectorAll<HTMLAnchorElement>("#nav a")) {
    a.classList.toggle("current", !!route && a.dataset.page === route[1]);
  }
  if (!route) {
    clear(main).append(h("h1", {}, "No such page"), h("p", {}, h("a", { href: "/" }, "Cluster")));
    return;
  }
  const ticket = ++shown;
  watch();
  let rendering = false;
  let again = false; // a change came while rendering: render once more after
  const changed = () => {
    if (ticket !== shown) return;
    if (rendering) {
      again = true;
      return;
    }
    clearTimeout(timer);
    timer = setTimeout(() => render(false), 100); // changes close together: one read
  };
  current = { topics: route[3], changed };
  const render = async (first: boolean): Promise<void> => {
    rendering = true;
    let focusKeep = false;
    try {
      const view = await route[2](path.match(route[0])!, new URLSearchParams(location.search));
      if (ticket !== shown) return destroyCharts(view as ParentNode);
      // A refresh keeps what the person typed or scrolled to: only the data part is replaced.
      focusKeep = !first && main.contains(document.activeElement);
      if (focusKeep) {
        destroyCharts(view as ParentNode);
      } else {
        destroyCharts(main);
        clear(main).append(view);
      }
    } catch (e) {
      if (ticket !== shown || !sessionStorage.getItem(TOKEN_KEY)) return;
      destroyCharts(main);
      clear(main).append(h("h1", {}, "Could not load this page"), h("p", { class: "error" },
        e instanceof Error ? e.message : String(e)));
    }
    rendering = false;
    if (ticket !== shown) return;
    clearTimeout(timer);
    // (What was kept back for a focused field is tried again soon.)
    timer = setTimeout(() => render(false),
      again ? 100 : live && !focusKeep ? route[4] || LIVE_REFRESH_MS : REFRESH_MS);
    again = false;
  };
  await render(true);
}

function signInForm(main: HTMLElement, why?: string): void {
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
  destroyCharts(main);
  clear(main).append(form);
  input.focus();
}

function signOut(why?: string): void {
  sessionStorage.removeItem(TOKEN_KEY);
  slow.clear();
  whoami = null;
  clearTimeout(timer);
  ++shown;
  current = null;
  if (stream) stream.abort();
  stream = null;
  setLive(false);
  document.getElementById("who")!.textContent = "";
  document.getElementById("signout")!.hidden = true;
  signInForm(document.getElementById("main")!, why);
}

// Links inside the app change the page without reloading it.
export function go(url: string): void {
  history.pushState(null, "", url);
  show();
}
document.addEventListener("click", (ev) => {
  const a = (ev.target as Element | null)?.closest?.("a");
  if (!a || a.origin !== location.origin || ev.ctrlKey || ev.metaKey || a.target) return;
  ev.preventDefault();
  go(a.pathname + a.search);
});
window.addEventListener("popstate", show);
// Leaving the page ends its stream: the browser keeps a streamed answer's connection open
// otherwise, and holds at most six connections to a server.
window.addEventListener("pagehide", () => {
  const s = stream;
  stream = null;
  if (s) s.abort();
});
window.addEventListener("pageshow", (ev) => {
  if (ev.persisted) show(); // back from the browser's cache: open the stream again
});
document.getElementById("signout")!.addEventListener("click", () => signOut());
show();
