// Nodes: every GPU of every node, coloured by state, with the node's health and, when it
// drains, how far along it is and when its last job is expected to end.
import { api } from "../app";
import { h, when, fraction } from "../dom";
import type { Gpus } from "../types";

const STATES = ["allocated", "unallocated", "idle", "draining", "down"];

export async function nodesPage(): Promise<Node> {
  const g = await api<Gpus>("/gpus");
  const rows = g.nodes.map((n) => h("div", { class: "node", "data-node": n.name },
    h("span", { class: "name" }, n.name),
    h("span", { class: "meta" }, `${n.cluster} · ${n.model} · ${n.gpus.length} GPUs`),
    h("span", { class: "badge " + n.health, title: n.health_reason }, n.health),
    n.cordoned ? h("span", { class: "badge draining" }, "cordoned") : "",
    h("span", { class: "gpus" }, n.gpus.map((gpu) => {
      // The node's last report: { time, gpus: [{ index, util_pct, … }] }.
      const tel = (n.telemetry?.gpus || []).find((t) => t.index === gpu.index);
      const jobs = gpu.jobs.map((id) => "job " + id).concat(
        gpu.other_jobs ? [`${gpu.other_jobs} other`] : []).join(", ");
      const title = `GPU ${gpu.index}: ${gpu.state}` + (jobs ? ` (${jobs})` : "") +
        (tel && typeof tel.util_pct === "number" ? `, ${tel.util_pct}% busy` : "");
      const cell = h("span", { class: "gpu " + gpu.state, title, "data-state": gpu.state },
        gpu.index);
      return gpu.jobs.length === 1 ? h("a", { href: `/jobs/${gpu.jobs[0]}` }, cell) : cell;
    })),
    n.draining ? h("span", { class: "drain" }, fraction(1 - n.busy_gpus / n.gpus.length,
      "drained"),
      ` ${n.gpus.length - n.busy_gpus}/${n.gpus.length} free` +
      (n.busy_gpus ? `, last job expected to end ${when(n.drain_eta)}` : ", drained")) : ""));
  return h("section", { id: "nodes" },
    h("h1", {}, `Nodes (${g.nodes.length})`),
    h("div", { class: "legend" }, STATES.map((k) => h("span", { class: k }, k))),
    g.nodes.length ? h("div", { class: "grid" }, rows) : h("p", { class: "muted" }, "No nodes."));
}
