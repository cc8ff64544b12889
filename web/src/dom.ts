// Building the page from data without innerHTML: every text the API returns (job names, reasons,
// log lines) becomes a text node, never markup.
export type Attrs = Record<string, string | number | boolean | null | undefined>;
export type Child = Node | string | number | null | undefined | false | Child[];

function build<E extends Element>(el: E, attrs: Attrs | null | undefined, children: Child[]): E {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    el.setAttribute(k, v === true ? "" : String(v));
  }
  const add = (c: Child): void => {
    if (Array.isArray(c)) return c.forEach(add);
    if (c === undefined || c === null || c === "" || c === false) return;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  };
  children.forEach(add);
  return el;
}

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs?: Attrs | null,
  ...children: Child[]): HTMLElementTagNameMap[K] {
  return build(document.createElement(tag), attrs, children);
}

export function clear<E extends Element>(el: E): E {
  el.replaceChildren();
  return el;
}

// Words for numbers and times.
export const pct = (v: number | null | undefined): string =>
  v === null || v === undefined ? "–" : (100 * v).toFixed(1) + "%";
export const gpus = (milli: number): string => (milli / 1000).toFixed(milli % 1000 ? 2 : 0);
export function when(t: number | null | undefined): string {
  if (t === null || t === undefined || t <= 0) return "–";
  return new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) + "Z";
}
export function ago(t: number, now: number): string {
  const d = Math.max(0, now - t);
  if (d < 120) return `${d}s`;
  if (d < 7200) return `${Math.round(d / 60)}m`;
  if (d < 172800) return `${Math.round(d / 3600)}h`;
  return `${Math.round(d / 86400)}d`;
}
export const hours = (sec: number): string => (sec / 3600).toFixed(1);

export function table(head: string[], rows: Child[][], attrs?: Attrs): HTMLTableElement {
  return h("table", attrs || {},
    h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c) =>
      c instanceof HTMLTableCellElement ? c : h("td", {}, c))))));
}
export const num = (v: Child): HTMLTableCellElement => h("td", { class: "num" }, v);

// A fraction 0..1 as a bar (drain progress, delivered share): the browser's own <meter>.
export const fraction = (f: number | null | undefined, label: string): HTMLMeterElement =>
  h("meter", { min: 0, max: 1, value: Math.max(0, Math.min(1, f || 0)), title: label,
    "aria-label": label });

// "preempted for job 24 after ..." with each job number a link to that job's page.
export function withJobLinks(text: string): Child[] {
  const out: Child[] = [];
  let last = 0;
  for (const m of String(text).matchAll(/job (\d+)/g)) {
    out.push(text.slice(last, m.index), "job ", h("a", { href: `/jobs/${m[1]}` }, m[1]));
    last = (m.index ?? 0) + m[0].length;
  }
  out.push(text.slice(last));
  return out;
}

// A part of a page shown when `answer` comes (a slow read), without holding up the rest.
export function later<T>(answer: Promise<T>, render: (v: T) => Child,
  what = "Loading…"): HTMLDivElement {
  const el = h("div", { class: "later" }, h("p", { class: "muted" }, what));
  answer.then((v) => el.replaceChildren(h("div", {}, render(v))),
    (e: unknown) => el.replaceChildren(h("p", { class: "muted" },
      e instanceof Error ? e.message : String(e))))
    .finally(() => el.classList.add("done"));
  return el;
}
