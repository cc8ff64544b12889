// Cluster: is the cluster healthy and busy, and why does work wait? The four metrics over the
// last hour and the last 7 days, GPUs by state per GPU model, fragmentation (idle GPUs no waiting
// job can use), and the queue by reason.
import { api, cached } from "../app.js";
import { h, pct, table, num, later } from "../dom.js";
import { stackedBars } from "../charts.js";

const STATES = ["allocated", "unallocated", "idle", "draining", "down"];

function metricCards(title, r) {
  return h("div", {}, h("h2", {}, title), h("div", { class: "cards" },
    card("Availability", pct(r.availability.value), "healthy GPU-time ÷ all GPU-time"),
    card("Occupancy", pct(r.occupancy.value),
      `${pct(r.occupancy.allocated)} allocated, ${pct(r.occupancy.unallocated)} unallocated`),
    card("Impact", pct(r.impact.mean), r.impact.min_budget
      ? `worst ${pct(r.impact.min)} (${r.impact.min_budget})` : "owed GPU-time delivered"),
    card("Utilization", pct(r.utilization.value),
      `${r.utilization.jobs_measured} jobs measured`)));
}
const card = (label, value, note) => h("div", { class: "card" },
  h("div", { class: "label" }, label), h("div", { class: "value" }, value),
  h("div", { class: "muted" }, note));

export async function clusterPage() {
  const [g, q] = await Promise.all([api("/gpus"), api("/queue?limit=1")]);
  // The metrics read the history (seconds over 100,000 jobs): shown when they come, the last
  // hour read at most once a minute, the last 7 days once in 5.
  const hour = cached("report-hour", 60000, `/report?from=${g.time - 3600}&to=${g.time}`);
  const week = cached("report-week", 300000, "/report");
  const models = g.by_model.map((m) => ({ label: `${m.cluster} ${m.model}`,
    parts: STATES.map((k) => ({ key: k, value: m[k] })) }));
  const reasons = Object.entries(q.by_reason).sort((a, b) => b[1] - a[1]);
  return h("section", { id: "cluster" },
    h("h1", {}, "Cluster"),
    later(hour, (r) => metricCards("Last hour", r), "Loading the last hour's metrics…"),
    later(week, (r) => metricCards("Last 7 days", r), "Loading the last 7 days' metrics…"),
    h("h2", {}, "GPUs by state"),
    h("div", { class: "legend" }, STATES.map((k) => h("span", { class: k }, k))),
    models.length ? stackedBars(models, { unit: " GPUs" }) : h("p", { class: "muted" }, "No nodes."),
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
      ? stackedBars(reasons.map(([code, n]) => ({ label: code, parts: [{ key: "plain", value: n }] })),
        { labelWidth: 220 })
      : h("p", { class: "muted" }, "Nothing is waiting."),
    table(["Reason", "Jobs"], reasons.map(([code, n]) => [code, num(n)]), { id: "by-reason" }));
}
