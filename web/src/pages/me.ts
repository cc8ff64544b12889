// Me: the signed-in person's budgets (where they may submit, what they manage), their standing
// in them this week, and their jobs.
import { api, me, weekReport } from "../app";
import { h, table, num, hours, pct, when, later, type Child } from "../dom";
import type { Budget, Budgets, Jobs, Report } from "../types";

export async function mePage(): Promise<Node> {
  const who = me();
  const jobsQ = new URLSearchParams({ limit: "100", order: "desc" });
  if (who.role === "admin") jobsQ.set("owner", who.subject);
  const [tree, jobs] = await Promise.all([api<Budgets>("/budgets"), api<Jobs>("/jobs?" + jobsQ)]);
  const report = weekReport();
  const mine = tree.budgets.filter((b) => (b.members || []).includes(who.subject) ||
    (b.owners || []).includes(who.subject) || (who.scope && b.path === who.scope));
  const as = (b: Budget): string => ((b.owners || []).includes(who.subject) || b.path === who.scope ? "manager"
    : "member");
  const standing = (r: Report): Child => {
    const rep = new Map(r.budgets.map((x) => [x.budget, x]));
    const rows = mine.filter((b) => rep.has(b.path)).map((b) => {
      const x = rep.get(b.path)!;
      return [b.path, num(hours(x.owed_gpu_seconds)), num(hours(x.allocated_gpu_seconds)),
        num(hours(x.unallocated_gpu_seconds)), num(pct(x.delivered_fraction)), num(pct(x.impact))];
    });
    return rows.length ? table(["Budget", "Owed GPU-h (7 d)", "Allocated GPU-h",
      "Unallocated GPU-h", "Allocated ÷ share", "Impact"], rows, { id: "my-standing" }) : "";
  };
  return h("section", { id: "me" },
    h("h1", {}, who.subject),
    h("p", {}, `Role ${who.role}` + (who.scope ? `, scope ${who.scope}` : "")),
    h("h2", {}, "My budgets"),
    mine.length ? table(["Budget", "As", "Share"], mine.map((b) => [b.path, as(b), num(b.share)]),
      { id: "my-budgets" }) : h("p", { class: "muted" }, "You are in no budget yet."),
    mine.length ? later(report, standing, "Loading my standing…") : "",
    h("h2", {}, "My jobs"),
    jobs.jobs.length ? table(["Job", "Budget", "State", "Class", "Submitted", "Reason"],
      jobs.jobs.map((j) => [h("a", { href: `/jobs/${j.id}` }, `${j.id} ${j.name}`), j.budget,
        j.state, j.runs > 0 ? (j.allocated ? "allocated" : "unallocated") : "–",
        when(j.submit_time), j.reason]), { id: "my-jobs" })
      : h("p", { class: "muted" }, "No jobs."));
}
