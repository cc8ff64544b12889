// Cluster: is the cluster healthy and busy, and why does work wait? The four metrics over the
// last hour and the last 7 days (now, and day by day), GPUs by state per GPU model,
// fragmentation (idle GPUs no waiting job can use), and the queue by reason.
import { api, cached, weekReport } from "../app";
import { h, pct, table, num, later, type Child } from "../dom";
import { bars, lines } from "../charts";
import type { Gpus, Queue, Report } from "../types";

const STATES = ["allocated", "unallocated", "idle", "draining", "down"] as const;

function metricCards(title: string, r: Report): Child {
  return h("div", {}, h("h2", {}, title), h("div", { class: "cards" },
    card("Availability", pct(r.availability.value), "healthy GPU-time ÷ all GPU-time"),
    card("Occupancy", pct(r.occupancy.value),
      `${pct(r.occupancy.allocated)} allocated, ${pct(r.occupancy.unallocated)} unallocated`),
    card("Impact", pct(r.impact.mean), r.impact.min_budget
      ? `worst ${pct(r.impact.min)} (${r.impact.min_budget})` : "owed GPU-time delivered"),
    card("Utilization", pct(r.utilization.value),
      `${r.utilization.jobs_measured} jobs measured`)));
}
const card = (label: string, value: string, note: string): Child => h("div", { class: "card" },
  h("div", { class: "label" }, label), h("div", { class: "value" }, value),
  h("div", { class: "muted" }, note));

// The four metrics of each of the last 7 days (the week's report, a step a day), as
// percentages; a day without GPU-time has no point.
function byDay(week: Report): Child {
  const days = week.steps || [];
  const v = (x: number | null | undefined): number => (x === null || x === undefined ? NaN
    : 100 * x);
  const series = [
    { key: "availability", label: "Availability", values: days.map((d) => v(d.availability.value)) },
    { key: "occupancy", label: "Occupancy", values: days.map((d) => v(d.occupancy.value)) },
    { key: "impact", label: "Impact", values: days.map((d) => v(d.impact.mean)) },
    { key: "utilization", label: "Utilization", values: days.map((d) => v(d.utilization.value)) },
  ].map((s) => ({ ...s, values: s.values.map((x) => (Number.isNaN(x) ? null : x)) }));
  return h("div", { id: "metrics-week" }, h("h2", {}, "Day by day, last 7 days"),
    lines("metrics-week", days.map((d) => d.to), series,
      { unit: "%", max: 100, width: 700 }));
}

export async function clusterPage(): Promise<Node> {
  const [g, q] = await Promise.all([api<Gpus>("/gpus"), api<Queue>("/queue?limit=1")]);
  // The metrics read the history (seconds over 100,000 jobs): shown when they come, the last
  // hour read at most once a minute, the last 7 days once in 5.
  const hour = cached<Report>("report-hour", 60000, `/report?from=${g.time - 3600}&to=${g.time}`);
  const week = weekReport();
  const reasons = Object.entries(q.by_reason).sort((a, b) => b[1] - a[1]);
  return h("section", { id: "cluster" },
    h("h1", {}, "Cluster"),
    later(hour, (r) => metricCards("Last hour", r), "Loading the last hour's metrics…"),
    later(week, (r) => metricCards("Last 7 days", r), "Loading the last 7 days' metrics…"),
    later(week, byDay, "Loading the metrics day by day…"),
    h("h2", {}, "GPUs by state"),
    g.by_model.length ? bars("gpus-by-state", g.by_model.map((m) => `${m.cluster} ${m.model}`),
      STATES.map((k) => ({ key: k, label: k, values: g.by_model.map((m) => m[k]) })),
    { unit: " GPUs", xLabel: "Model" }) : h("p", { class: "muted" }, "No nodes."),
    table(["Cluster", "Model", ...STATES], g.by_model.map((m) =>
      [m.cluster, m.model, ...STATES.map((k) => num(m[k]))]), { id: "by-model" }),
    h("h2", {}, "Fragmentation"),
    h("p", { class: "muted" }, "Idle GPUs no waiting job can use: on each node, free GPUs fewer " +
      "than the largest per-node request still waiting (or left over after whole requests)."),
    table(["Cluster", "Idle GPUs", "Largest waiting request per node", "Fragmented GPUs"],
      (g.clusters || []).map((c) => [c.name, num(c.free_gpus),
        num(c.largest_waiting_per_node ? `${c.largest_waiting_per_node} GPUs` : "nothing waits"),
        num(c.fragmented_gpus)]), { id: "fragmentation" }),
    h("h2", {}, `Waiting jobs by reason (${q.waiting})`),
    reasons.length
      ? bars("queue-by-reason", reasons.map(([code]) => code),
        [{ key: "plain", label: "jobs", values: reasons.map(([, n]) => n) }], { xLabel: "Reason" })
      : h("p", { class: "muted" }, "Nothing is waiting."),
    table(["Reason", "Jobs"], reasons.map(([code, n]) => [code, num(n)]), { id: "by-reason" }));
}
