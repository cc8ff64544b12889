// Budgets: the tree with shares and what each share is worth (fraction of each cluster), what
// each budget holds now (allocated vs unallocated GPUs), and owed vs delivered GPU-hours over the
// last 7 days, each budget's rank in the fair-share order and why (GET /standing), and the audit
// log of changes. Whoever may change a share edits it here, seeing the new fractions first.
import { api, cached, me, weekReport, type Whoami } from "../app";
import { h, table, num, gpus, hours, pct, later, when, fraction, type Child } from "../dom";
import { bars } from "../charts";
import type { Budget, Budgets, Gpus, Report } from "../types";

const parentOf = (p: string): string => (p.lastIndexOf("/") === 0 ? "/" : p.slice(0, p.lastIndexOf("/")));

// Fractions of the whole after `path`'s share becomes `share`: each budget's share among its
// siblings times its parent's fraction (the tree's rule, for one cluster without overrides).
export function previewFractions(budgets: Budget[], path: string,
  share: number): Record<string, number> {
  const shareOf = (b: Budget): number => (b.path === path ? share : b.share);
  const out: Record<string, number> = { "/": 1 };
  for (const b of [...budgets].sort((a, c) => a.depth - c.depth)) {
    if (b.path === "/") continue;
    const sibs = budgets.filter((x) => x.path !== "/" && parentOf(x.path) === parentOf(b.path));
    const sum = sibs.reduce((a, x) => a + shareOf(x), 0);
    out[b.path] = (out[parentOf(b.path)] ?? 0) * (sum > 0 ? shareOf(b) / sum : 0);
  }
  return out;
}

// Whether the signed-in principal may change this budget's share (the API decides; this only
// hides controls it would refuse): admins any but the root, managers strictly below what they
// manage.
function mayEdit(who: Whoami, path: string, budgets: Budget[]): boolean {
  if (path === "/") return false;
  if (who.role === "admin") return true;
  const scopes: string[] = [];
  if (who.role === "manager" && who.scope) scopes.push(who.scope);
  for (const b of budgets) if ((b.owners || []).includes(who.subject)) scopes.push(b.path);
  return scopes.some((s) => path.startsWith(s === "/" ? "/" : s + "/"));
}

function shareEditor(b: Budget, budgets: Budget[], onSaved: () => void): Child {
  const input = h("input", { type: "number", min: "0.000001", step: "any", value: b.share,
    size: 6, "aria-label": `share of ${b.path}` });
  const preview = h("div", { class: "muted preview" });
  const save = h("button", { type: "button" }, "Save");
  const msg = h("span", {});
  input.addEventListener("input", () => {
    const v = Number(input.value);
    if (!(v > 0)) {
      preview.replaceChildren("a share must be a positive number");
      return;
    }
    const before = previewFractions(budgets, b.path, b.share);
    const after = previewFractions(budgets, b.path, v);
    const sibs = budgets.filter((x) => x.path !== "/" && parentOf(x.path) === parentOf(b.path));
    preview.replaceChildren(...sibs.map((x) => h("div", {},
      `${x.path}: ${pct(before[x.path])} → ${pct(after[x.path])} of the cluster`)));
  });
  save.addEventListener("click", async () => {
    try {
      await api("/budgets", { path: b.path, share: Number(input.value) });
      msg.textContent = " saved";
      // The page refreshes again (not while a field of it has the focus): the new share and
      // its audit entry show within the refresh.
      input.blur();
      save.blur();
      onSaved();
    } catch (e) {
      msg.textContent = " " + (e instanceof Error ? e.message : String(e));
    }
  });
  return h("div", { class: "share-edit" }, input, " ", save, msg, preview);
}

// The spans a budget's allocation vs usage is shown over: the last 24 hours by hour, the last
// 7 days by day (the week's report the page reads anyway) and the last 12 weeks by week.
const SPANS = {
  hours: { title: "last 24 hours", step: 3600, steps: 24, label: (t: number) =>
    new Date(t * 1000).toISOString().slice(11, 16) },
  days: { title: "last 7 days", step: 86400, steps: 7, label: (t: number) =>
    new Date(t * 1000).toISOString().slice(5, 10) },
  weeks: { title: "last 12 weeks", step: 7 * 86400, steps: 12, label: (t: number) =>
    new Date(t * 1000).toISOString().slice(5, 10) },
} as const;
type Span = keyof typeof SPANS;
const spanOf = (v: string | null): Span => (v === "hours" || v === "weeks" ? v : "days");
function spanReport(span: Span, now: number): Promise<Report> {
  if (span === "days") return weekReport();
  const { step, steps } = SPANS[span];
  return cached<Report>(`report-${span}`, span === "hours" ? 60000 : 300000,
    `/report?from=${now - step * steps}&to=${now}&step=${step}`);
}

// Allocation vs usage of `path` each step of the span (a report with steps): the allocated and
// unallocated GPU-hours it held (stacked bars), its share of the available capacity and its
// demand (GPU-hours its running and waiting jobs asked for) as lines.
function allocationVsUsage(path: string, report: Report, span: Span): Child {
  const points = (report.steps || []).map((d) => {
    const row = d.budgets.find((r) => r.budget === path);
    const gh = (v: number | undefined): number => (v || 0) / 3600;
    return { label: SPANS[span].label(d.to),
      allocated: gh(row?.allocated_gpu_seconds), unallocated: gh(row?.unallocated_gpu_seconds),
      share: gh(row?.share_gpu_seconds), demand: gh(row?.demand_gpu_seconds) };
  });
  const shared = points.some((d) => d.share > 0);
  const per = span === "hours" ? "an hour" : span === "days" ? "a day" : "a week";
  const link = (k: Span): Child => (k === span ? h("strong", {}, SPANS[k].title)
    : h("a", { href: `/budgets?budget=${encodeURIComponent(path)}&over=${k}` }, SPANS[k].title));
  return h("div", { id: "week", "data-from": report.from, "data-step": report.step ?? 0 },
    h("h2", {}, `${path}: allocation vs usage, ${SPANS[span].title}`),
    h("p", { class: "muted", id: "spans" }, link("hours"), " · ", link("days"), " · ",
      link("weeks")),
    bars("week", points.map((d) => d.label), [
      { key: "allocated", label: "allocated GPU-h", values: points.map((d) => d.allocated) },
      { key: "unallocated", label: "unallocated GPU-h", values: points.map((d) => d.unallocated) }],
    { unit: " GPU-h", xLabel: span === "hours" ? "Hour" : span === "days" ? "Day" : "Week",
      width: span === "hours" ? 960 : 560,
      lines: [
        ...(shared ? [{ key: "share", label: `its share ${per}`, values: points.map((d) => d.share) }]
          : []),
        { key: "demand", label: "demand", values: points.map((d) => d.demand) }] }));
}

// Owed vs delivered over the last 7 days, per budget (GET /report).
function standing(report: Report, list: Budget[]): Child {
  const rep = new Map(report.budgets.map((r) => [r.budget, r]));
  return h("div", {}, h("h2", {}, "Owed vs delivered, last 7 days"),
    table(["Budget", "Owed GPU-h", "Allocated GPU-h", "Unallocated GPU-h", "Allocated ÷ share",
      "Impact"], list.filter((b) => rep.has(b.path)).map((b) => {
      const r = rep.get(b.path)!;
      return [h("td", { class: `indent-${Math.min(b.depth, 4)}` }, b.path),
        num(hours(r.owed_gpu_seconds)), num(hours(r.allocated_gpu_seconds)),
        num(hours(r.unallocated_gpu_seconds)),
        r.share_gpu_seconds > 0 ? h("td", {}, fraction(r.delivered_fraction,
          `${b.path}: allocated ÷ share`), " ",
          pct(r.delivered_fraction)) : "–", num(pct(r.impact))];
    }), { id: "standing" }));
}

// Each budget's rank among its siblings per cluster (GET /standing), and why: the lower its
// standing ((usage + promised) ÷ allocation over the lookback window), the earlier its jobs go.
const fixed = (v: number | null | undefined, d = 1): string => (v === null || v === undefined ? "∞"
  : v > 0 && v < 10 ** -d ? Number(v).toPrecision(2) : Number(v).toFixed(d));
interface Standing {
  at: number;
  budgets: { budget: string; clusters: { cluster: string; rank: number; siblings: number;
    standing: number | null; usage_gpu_hours: number; promised_gpu_hours: number;
    allocation_gpu_hours: number; waiting?: number }[] }[];
}
function ranks(st: Standing): Child {
  const rows: Child[][] = [];
  for (const b of st.budgets) {
    for (const c of b.clusters) {
      rows.push([b.budget, c.cluster, h("td", { class: "num rank" }, `${c.rank} of ${c.siblings}`),
        num(fixed(c.standing, 3)),
        `(${fixed(c.usage_gpu_hours)} used + ${fixed(c.promised_gpu_hours)} promised GPU-h) ÷ ` +
        `${fixed(c.allocation_gpu_hours)} allocated GPU-h` + (c.waiting ? `; ${c.waiting} waiting`
          : "") + (c.rank === 1 && c.siblings > 1 ? ": the lowest standing of its siblings, first"
          : c.rank > 1 ? `: after ${c.rank - 1} sibling${c.rank > 2 ? "s" : ""} with a standing ` +
            "as low or lower" : "")]);
    }
  }
  return h("div", {}, h("h2", {}, "Rank in the fair-share order"),
    h("p", { class: "muted" }, "Among its siblings, per cluster: lowest standing first. " +
      `Standing as of ${when(st.at)}.`),
    table(["Budget", "Cluster", "Rank", "Standing", "Why"], rows, { id: "ranks" }));
}

// Right-sizing advice this week per budget (GET /advice, what `allot advise` prints): the jobs
// measured and named, for each reason, and the GPU-hours measured, idle and starved.
interface Advice {
  budgets: { budget: string; jobs_measured: number; jobs_named: number; idle: number;
    starved: number; oversized_memory: number; gpu_hours: number; idle_gpu_hours: number;
    starved_gpu_hours: number }[];
}
function waste(a: Advice): Child {
  return h("div", {}, h("h2", {}, "Waste, last 7 days"),
    a.budgets.length ? table(["Budget", "Jobs measured", "Named", "Idle", "Starved", "Oversized",
      "GPU-h", "Idle GPU-h", "Starved GPU-h"], a.budgets.map((b) => [b.budget,
      num(b.jobs_measured), num(b.jobs_named), num(b.idle), num(b.starved),
      num(b.oversized_memory), num(b.gpu_hours.toFixed(1)), num(b.idle_gpu_hours.toFixed(1)),
      num(b.starved_gpu_hours.toFixed(1))]), { id: "waste" })
      : h("p", { class: "muted", id: "waste" }, "No job measured this week."));
}

// The audit log of changes to budgets the signed-in principal may read (admins: all; managers:
// their scope), newest first.
interface Audit {
  entries: { time: number; actor: string; path: string; field: string; old: string;
    new: string }[];
}
function auditLog(a: Audit): Child {
  return h("div", {}, h("h2", {}, "Audit log"),
    a.entries.length ? table(["Time", "Who", "Budget", "Field", "Old", "New"], a.entries.map((e) =>
      [when(e.time), e.actor, e.path, e.field, e.old, e.new]), { id: "audit" })
      : h("p", { class: "muted", id: "audit" }, "No changes recorded."));
}

export async function budgetsPage(_m: RegExpMatchArray, params: URLSearchParams): Promise<Node> {
  const [tree, g] = await Promise.all([api<Budgets>("/budgets"), api<Gpus>("/gpus")]);
  // The history (seconds over 100,000 jobs) comes later, read at most once in 5 minutes.
  const report = weekReport();
  const who = me();
  const list = tree.budgets;
  // The standing reads the last 7 days too: at most once a minute.
  const order = cached<Standing>("standing", 60000, "/standing");
  const advice = cached<Advice>("advice-week", 300000, "/advice");
  const auditScope = who.role === "admin" ? "/" : who.role === "manager" ? who.scope : null;
  const audit = auditScope
    ? api<Audit>(`/budgets/audit?path=${encodeURIComponent(auditScope)}&limit=20`) : null;
  const rows = list.map((b) => {
    const held = g.budgets[b.path] || { allocated_milli: 0, unallocated_milli: 0 };
    const frac = Object.entries(b.fraction).map(([c, f]) => `${c} ${pct(f)}`).join(", ");
    return [h("td", { class: `indent-${Math.min(b.depth, 4)}` },
      h("a", { href: "/budgets?budget=" + encodeURIComponent(b.path) }, b.path)),
    mayEdit(who, b.path, list) ? h("td", {}, shareEditor(b, list, () => {})) : num(b.share),
    frac || "–", num(gpus(held.allocated_milli)), num(gpus(held.unallocated_milli)),
    (b.members || []).join(", ")];
  });
  const holding = list.filter((b) => g.budgets[b.path] && b.path !== "/");
  const held = (key: "allocated_milli" | "unallocated_milli"): number[] =>
    holding.map((b) => g.budgets[b.path]![key] / 1000);
  const span = spanOf(params.get("over"));
  const chartOf = (r: Report): Child => {
    const chosen = params.get("budget") ||
      (r.budgets.find((b) => b.budget !== "/" && b.budget !== r.scope) || { budget: r.scope }).budget;
    return r.budgets.some((b) => b.budget === chosen) ? allocationVsUsage(chosen, r, span) : "";
  };
  return h("section", { id: "budgets" },
    h("h1", {}, "Budgets"),
    table(["Budget", "Share", "Fraction", "Allocated GPUs now", "Unallocated GPUs now",
      "Members"], rows, { id: "tree" }),
    h("h2", {}, "GPUs held now"),
    holding.length ? bars("held", holding.map((b) => b.path), [
      { key: "allocated", label: "allocated", values: held("allocated_milli") },
      { key: "unallocated", label: "unallocated", values: held("unallocated_milli") }],
    { unit: " GPUs", xLabel: "Budget" })
      : h("p", { class: "muted" }, "No budget holds GPUs now."),
    later(report, (r) => standing(r, list), "Loading owed vs delivered…"),
    later(spanReport(span, g.time), chartOf, `Loading the ${SPANS[span].title}…`),
    later(order, ranks, "Loading the fair-share order…"),
    later(advice, waste, "Loading the week's waste…"),
    audit ? later(audit, auditLog, "Loading the audit log…") : "");
}
