// Job: what was asked (spec), what was promised (contract), what happened (runs and events, with
// the job that took its GPUs linked), how well it used them (telemetry) and what it printed.
import { api, apiResponse, ApiError } from "../app";
import { h, table, when, pct, withJobLinks, type Child } from "../dom";
import { bars, timeline, sparkline } from "../charts";
import type { Gpus, Job } from "../types";

const kv = (pairs: [string, Child][]): Child => h("dl", { class: "kv" },
  pairs.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v ?? "–")]));

// The last lines of stdout: read a MiB at a time from the start (the API reads forward from an
// offset) until the end, keeping the last MiB; at most 16 reads.
async function logTail(j: Job): Promise<Child> {
  if (j.runs === 0) return h("p", { class: "muted", id: "log" }, "Not started: no log yet.");
  const MIB = 1 << 20;
  let offset = 0;
  let last = "";
  try {
    for (let i = 0; i < 16; ++i) {
      const res = await apiResponse(`/jobs/${j.id}/logs?stream=stdout&offset=${offset}`);
      const bytes = await res.arrayBuffer();
      if (bytes.byteLength) last = new TextDecoder().decode(bytes);
      const next = Number(res.headers.get("Allot-Next-Offset"));
      if (!(next > offset) || bytes.byteLength < MIB) break;
      offset = next;
    }
  } catch (e) {
    if (e instanceof ApiError) return h("p", { class: "muted", id: "log" }, "No logs: " + e.message);
    throw e;
  }
  return h("pre", { class: "log", id: "log" }, last.split("\n").slice(-60).join("\n") || "(empty)");
}

// GPU use and memory over the current run, a point per agent report (GET .../telemetry samples).
interface Sample { time: number; gpu_util_pct: number; mem_used_mib: number;
  mem_total_mib: number }
interface Telemetry {
  current?: Summary; total?: Summary; samples?: Sample[];
  flags: { flag: string; hint: string }[]; advice?: { reason: string; hint: string }[];
}
interface Summary { gpu_util_mean?: number; gpu_util_peak?: number; utilization: number | null;
  mem_used_peak_mib: number; mem_total_mib: number; cpu_pct_mean?: number;
  io_wait_pct_mean?: number }
interface JobEvent { time: number; from?: string; to: string; reason: string }

function sparklines(samples: Sample[] | undefined): Child {
  if (!samples || !samples.length) return "";
  const last = samples[samples.length - 1]!;
  const memMax = Math.max(1, ...samples.map((p) => p.mem_total_mib || p.mem_used_mib));
  return h("div", { class: "sparklines", id: "sparklines" },
    h("div", { id: "spark-util" }, h("span", { class: "label" }, "GPU use, %: "),
      sparkline("util", samples.map((p) => ({ t: p.time, v: Number(p.gpu_util_pct.toFixed(1)) })),
        { unit: "%" }), ` now ${last.gpu_util_pct.toFixed(1)}%`),
    h("div", { id: "spark-mem" }, h("span", { class: "label" }, "Memory, MiB: "),
      sparkline("mem", samples.map((p) => ({ t: p.time, v: p.mem_used_mib })),
        { max: memMax, unit: " MiB", key: "unallocated" }), ` now ${last.mem_used_mib} of ${last.mem_total_mib} MiB`),
    h("div", { class: "muted" }, `${samples.length} reports since ${when(samples[0]!.time)}`));
}

const running = (j: Job): boolean => ["starting", "running", "preempting"].includes(j.state);

export async function jobPage(m: RegExpMatchArray): Promise<Node> {
  const id = m[1];
  const [j, why, ev, tel, gpus] = await Promise.all([api<Job>(`/jobs/${id}`),
    api<{ code: string; explanation: string; rank?: number; expected_start?: number }>(
      `/jobs/${id}/why`),
    api<{ events: JobEvent[] }>(`/jobs/${id}/events`), api<Telemetry>(`/jobs/${id}/telemetry`),
    api<Gpus>("/gpus")]);
  const now = gpus.time;
  const spec = j.spec;
  const events = ev.events.map((e) => ({ time: e.time, kind: e.to,
    label: `${when(e.time)} ${e.from || "–"} → ${e.to}: ${e.reason}` }));
  const waiting = j.state === "pending" || j.state === "requeued";
  const t = tel.current || tel.total;
  // Per-GPU utilization now, from the nodes' latest samples, for the GPUs this job holds.
  // (A node's telemetry is its last report: { time, gpus: [{ index, util_pct, … }] }.)
  const mine: number[] = [];
  const mineLabels: string[] = [];
  for (const slot of j.placement || []) {
    const n = gpus.nodes.find((x) => x.name === slot.node);
    const sample = (n?.telemetry?.gpus || []).find((g) => g.index === slot.gpu);
    if (sample && typeof sample.util_pct === "number") {
      mine.push(sample.util_pct);
      mineLabels.push(String(slot.gpu));
    }
  }
  // The latest point of the current run's series: GPU use and memory as last reported.
  const latest = running(j) && tel.samples?.length ? tel.samples[tel.samples.length - 1]! : null;
  return h("section", { id: "job" },
    h("h1", {}, `Job ${j.id} ${j.name}`),
    kv([["State", h("b", { id: "job-state" }, j.state)], ["Reason", withJobLinks(j.reason)],
      ["Owner", j.owner], ["Budget", j.budget], ["Submitted", when(j.submit_time)]]),
    h("h2", {}, waiting ? "Why it waits" : "Now"),
    kv([["Code", h("span", { id: "why-code" }, why.code)],
      ["Explanation", withJobLinks(why.explanation)],
      ...(waiting ? [["Rank", why.rank], ["Expected start", when(why.expected_start)]] as
        [string, Child][] : [])]),
    h("h2", {}, "Contract"),
    kv([["Class", j.runs > 0 ? h("span", { id: "job-class",
      class: "badge " + (j.allocated ? "allocated" : "unallocated") },
    j.allocated ? "allocated" : "unallocated") : "not started"],
    ["Minimum runtime", `${spec.min_runtime ?? 0} s`],
    ["Protected until", j.runs > 0 && j.protected_until > j.run_start ? when(j.protected_until)
      : "not protected"],
    ["Priority", spec.priority], ["Resumable", String(!!spec.resumable)],
    ["Expected duration", spec.expected_duration ? `${spec.expected_duration} s` : "–"]]),
    h("h2", {}, "Spec"),
    kv([["Kind", spec.kind], ["Shape", `${spec.nodes} × ${spec.gpus_per_node} GPUs` +
      (spec.gpu_milli && spec.gpu_milli !== 1000 ? ` (${spec.gpu_milli / 1000} each)` : "")],
    ["Models", (spec.models || []).join(", ") || "any"],
    ["Clusters", (spec.clusters || []).join(", ") || "any"],
    ["Command", (spec.command || []).join(" ")],
    ["Placement", (j.placement || []).map((p) => `${p.node}:${p.gpu}`).join(" ") || "–"]]),
    h("h2", {}, `Runs and events (${j.runs} runs)`),
    events.length ? timeline("events", events, Math.max(now, ...events.map((e) => e.time))) : "",
    table(["Time", "From", "To", "Reason"], ev.events.map((e) =>
      [when(e.time), e.from || "–", e.to, h("span", {}, withJobLinks(e.reason))]), { id: "events" }),
    h("h2", {}, "Telemetry"),
    t ? kv([["GPU use (mean / peak)", `${t.gpu_util_mean?.toFixed?.(1) ?? "–"}% / ` +
      `${t.gpu_util_peak ?? "–"}%`], ["Utilization", pct(t.utilization)],
    ["Memory peak", `${t.mem_used_peak_mib} of ${t.mem_total_mib} MiB`],
    ["CPU / I/O wait", `${t.cpu_pct_mean?.toFixed?.(1) ?? "–"}% / ` +
      `${t.io_wait_pct_mean?.toFixed?.(1) ?? "–"}%`],
    ["GPU use now", latest ? h("span", { id: "gpu-now" }, `${latest.gpu_util_pct.toFixed(1)}%, ` +
      `${latest.mem_used_mib} of ${latest.mem_total_mib} MiB (reported ${when(latest.time)})`)
      : "–"],
    ["GPU use now, per GPU", mine.length ? h("span", { id: "gpu-now-per-gpu",
      title: mine.map((u) => u + "%").join(" ") }, bars("gpu-now", mineLabels, [{ key: "allocated", label: "GPU use",
        values: mine }], { width: 240, height: 100, unit: "%", max: 100, xLabel: "GPU" })) : "–"],
    ...tel.flags.map((f): [string, Child] => [f.flag, f.hint])])
      : h("p", { class: "muted" }, "No telemetry yet (simulated nodes send none)."),
    sparklines(tel.samples),
    // Right-sizing advice over all its runs: the same as `allot advise` (GET /advice).
    ...((tel.advice || []).length ? [h("h2", {}, "Advice"),
      h("div", { id: "advice" }, kv((tel.advice || []).map((a): [string, Child] =>
        [a.reason, a.hint])))] : []),
    h("h2", {}, "Log tail (stdout)"),
    await logTail(j));
}
