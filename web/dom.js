// Building the page from data without innerHTML: every text the API returns (job names, reasons,
// log lines) becomes a text node, never markup.
const SVG = "http://www.w3.org/2000/svg";

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === "") continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export const h = (tag, attrs, ...children) => build(document.createElement(tag), attrs, children);
export const s = (tag, attrs, ...children) =>
  build(document.createElementNS(SVG, tag), attrs, children);

export function clear(el) {
  el.replaceChildren();
  return el;
}

// Words for numbers and times.
export const pct = (v) => (v === null || v === undefined ? "–" : (100 * v).toFixed(1) + "%");
export const gpus = (milli) => (milli / 1000).toFixed(milli % 1000 ? 2 : 0);
export function when(t) {
  if (t === null || t === undefined || t <= 0) return "–";
  return new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) + "Z";
}
export function ago(t, now) {
  const d = Math.max(0, now - t);
  if (d < 120) return `${d}s`;
  if (d < 7200) return `${Math.round(d / 60)}m`;
  if (d < 172800) return `${Math.round(d / 3600)}h`;
  return `${Math.round(d / 86400)}d`;
}
export const hours = (sec) => (sec / 3600).toFixed(1);

export function table(head, rows, attrs) {
  return h("table", attrs || {},
    h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))),
    h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c) =>
      c instanceof Node && c.tagName === "TD" ? c : h("td", {}, c))))));
}
export const num = (v) => h("td", { class: "num" }, v);

// "preempted for job 24 after ..." with each job number a link to that job's page.
export function withJobLinks(text) {
  const out = [];
  let last = 0;
  for (const m of String(text).matchAll(/job (\d+)/g)) {
    out.push(text.slice(last, m.index), "job ", h("a", { href: `/jobs/${m[1]}` }, m[1]));
    last = m.index + m[0].length;
  }
  out.push(text.slice(last));
  return out;
}

// A part of a page shown when `answer` comes (a slow read), without holding up the rest.
export function later(answer, render, what = "Loading…") {
  const el = h("div", { class: "later" }, h("p", { class: "muted" }, what));
  answer.then((v) => el.replaceChildren(render(v)),
    (e) => el.replaceChildren(h("p", { class: "muted" }, String(e.message))))
    .finally(() => el.classList.add("done"));
  return el;
}
