// Me: the signed-in person's budgets (where they may submit, what they manage), their standing
// in them this week, and their jobs.
import { api, me, ApiError } from "../app.js";
import { h, table, num, hours, pct, when } from "../dom.js";

export async function mePage() {
  const who = me();
  const jobsQ = new URLSearchParams({ limit: "100", order: "desc" });
  if (who.role === "admin") jobsQ.set("owner", who.subject);
  const [tree, jobs, report] = await Promise.all([api("/budgets"), api("/jobs?" + jobsQ),
    api("/report").catch((e) => (e instanceof ApiError ? null : Promise.reject(e)))]);
  const mine = tree.budgets.filter((b) => (b.members || []).includes(who.subject) ||
    (b.owners || []).includes(who.subject) || (who.scope && b.path === who.scope));
  const rep = new Map((report ? report.budgets : []).map((r) => [r.budget, r]));
  return h("section", { id: "me" },
    h("h1", {}, who.subject),
    h("p", {}, `Role ${who.role}` + (who.scope ? `, scope ${who.scope}` : "")),
    h("h2", {}, "My budgets"),
    mine.length ? table(["Budget", "As", "Share", "Owed GPU-h (7 d)", "Allocated GPU-h",
      "Unallocated GPU-h", "Allocated ÷ owed", "Impact"], mine.map((b) => {
      const r = rep.get(b.path);
      const as = (b.owners || []).includes(who.subject) || b.path === who.scope ? "manager"
        : "member";
      return [b.path, as, num(b.share), num(r ? hours(r.owed_gpu_seconds) : "–"),
        num(r ? hours(r.allocated_gpu_seconds) : "–"),
        num(r ? hours(r.unallocated_gpu_seconds) : "–"),
        num(r ? pct(r.delivered_fraction) : "–"), num(r ? pct(r.impact) : "–")];
    }), { id: "my-budgets" }) : h("p", { class: "muted" }, "You are in no budget yet."),
    h("h2", {}, "My jobs"),
    jobs.jobs.length ? table(["Job", "Budget", "State", "Class", "Submitted", "Reason"],
      jobs.jobs.map((j) => [h("a", { href: `/jobs/${j.id}` }, `${j.id} ${j.name}`), j.budget,
        j.state, j.runs > 0 ? (j.allocated ? "allocated" : "unallocated") : "–",
        when(j.submit_time), j.reason]), { id: "my-jobs" })
      : h("p", { class: "muted" }, "No jobs."));
}
