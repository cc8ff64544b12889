// Queue: what waits, in fair-share order, and why; what runs, in which class and until when it
// is protected from preemption.
import { api, go } from "../app";
import { h, table, num, when, ago, type Child } from "../dom";
import type { Jobs, Queue } from "../types";

// Rows shown of each list at first, and the most a "show more" link asks for: with 100,000
// waiting jobs and 1,024 running, more rows cost the first paint far more than they tell.
const FIRST_ROWS = 100;
const MOST_ROWS = 1000;

export async function queuePage(_m: RegExpMatchArray, params: URLSearchParams): Promise<Node> {
  const limit = Math.min(MOST_ROWS, Math.max(1, Number(params.get("limit")) || FIRST_ROWS));
  const q = new URLSearchParams();
  for (const k of ["budget", "owner", "kind"]) if (params.get(k)) q.set(k, params.get(k)!);
  q.set("limit", String(limit));
  const running = new URLSearchParams({ state: "starting,running,preempting",
    limit: String(limit) });
  if (params.get("budget")) running.set("budget", params.get("budget")!);
  if (params.get("owner")) running.set("owner", params.get("owner")!);
  const [waiting, run] = await Promise.all([api<Queue>("/queue?" + q),
    api<Jobs>("/jobs?" + running)]);
  const kind = params.get("kind");
  const runs = run.jobs.filter((j) => !kind || (j.spec.kind || "batch") === kind);
  const now = waiting.time;
  // More of both lists, with the same filters.
  const more = (): Child => {
    if (limit >= MOST_ROWS || (!waiting.truncated && run.next == null)) return "";
    const p = new URLSearchParams(params);
    p.set("limit", String(Math.min(MOST_ROWS, limit * 5)));
    return h("p", {}, h("a", { href: "/queue?" + p, id: "more" },
      `Show up to ${Math.min(MOST_ROWS, limit * 5)} of each`));
  };

  const field = (name: string, label: string): Child => h("label", {}, label,
    h("input", { name, value: params.get(name) || "", size: 14 }));
  const kindSel = h("select", { name: "kind" }, ["", "batch", "interactive", "debug", "inference"]
    .map((k) => h("option", { value: k, selected: k === (kind || "") }, k || "any")));
  const form = h("form", { class: "filters", id: "filters" }, field("budget", "Budget"),
    field("owner", "User"), h("label", {}, "Kind", kindSel), h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) f.set(k, String(v));
    go("/queue" + (f.toString() ? "?" + f : ""));
  });

  return h("section", { id: "queue" },
    h("h1", {}, "Queue"), form,
    h("h2", {}, `Waiting (${waiting.jobs.length}${waiting.truncated ? "+" : ""} shown of ` +
      `${waiting.waiting} in the queue)`),
    waiting.jobs.length ? table(["Rank", "Job", "User", "Budget", "Kind", "GPUs", "Waiting",
      "Reason", "Expected start"], waiting.jobs.map((j) => [
      num(j.rank ?? "–"), h("a", { href: `/jobs/${j.id}` }, `${j.id} ${j.name}`), j.owner,
      j.budget, j.kind, num(j.nodes * j.gpus_per_node), ago(j.submit_time, now),
      h("span", { class: "reason", title: j.code }, h("b", {}, j.code), " ", j.explanation),
      when(j.expected_start)]), { id: "waiting" }) : h("p", { class: "muted" }, "Nothing waits."),
    more(),
    h("h2", {}, `Running (${runs.length}${run.next != null ? "+" : ""})`),
    runs.length ? table(["Job", "User", "Budget", "Kind", "State", "Class", "Running",
      "Protected until"], runs.map((j) => [
      h("a", { href: `/jobs/${j.id}` }, `${j.id} ${j.name}`), j.owner, j.budget,
      j.spec.kind || "batch", j.state,
      h("span", { class: "badge " + (j.allocated ? "allocated" : "unallocated") },
        j.allocated ? "allocated" : "unallocated"),
      ago(j.run_start, now),
      j.protected_until > now ? when(j.protected_until) : "not protected"]), { id: "running" })
      : h("p", { class: "muted" }, "Nothing runs."));
}
