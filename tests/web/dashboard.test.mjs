// The dashboard in a real headless Chromium against a real `allot up` (server and two local
// nodes whose agents run jobs as processes): sign in with a token, visit every page and check
// what it shows against what the API says. A preemption is made on purpose, so that the
// preempted job's page must link the job that took its GPUs. Every chart is a uPlot chart: each
// is checked for the data it was given (its host element keeps the instance: web/src/charts.ts)
// and for pixels of its series' colour on its canvas.
//
//   node dashboard.test.mjs <path to the allot binary> [artifacts dir]
// Exit 0: passed; 77: skipped (no chromium); anything else: failed.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import assert from "node:assert/strict";

const SKIP = 77;
const allotBin = process.argv[2];
const artifacts = process.argv[3] || join(tmpdir(), "allot-dashboard-artifacts");
const chromium = process.env.CHROMIUM || ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
  .find((p) => existsSync(p));
if (!chromium) {
  console.log("SKIP: no chromium (apt-get install chromium, or set CHROMIUM=/path)");
  process.exit(SKIP);
}
let playwright;
try {
  playwright = await import("playwright-core");
} catch (e) {
  console.error("playwright-core is not installed: run scripts/install-deps (npm ci in tests/web)");
  process.exit(1);
}
assert.ok(allotBin && existsSync(allotBin), "give the allot binary as the first argument");

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, fn, ms = 20000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${what} (last: ${last && (last.message ? last.message + (last.cause ? " " + last.cause : "") : JSON.stringify(last))})`);
}

const dir = mkdtempSync(join(tmpdir(), "allot-dashboard-"));
mkdirSync(artifacts, { recursive: true });
const up = spawn(allotBin, ["up", "--port", "0", "--data", join(dir, "allot.db"),
  "--addr-file", join(dir, "addr"), "--nodes", "2", "--tick-ms", "100", "--backend", "fake",
  "--telemetry-ms", "2000"],
{ stdio: ["ignore", "pipe", "pipe"] });
let upLog = "";
up.stdout.on("data", (d) => (upLog += d));
up.stderr.on("data", (d) => (upLog += d));

let browser;
let page;
const problems = [];
let failed = false;
try {
  const base = (await until("the server's address", () => existsSync(join(dir, "addr")) &&
    readFileSync(join(dir, "addr"), "utf8").trim())).replace(/\/$/, "");
  const admin = await until("the admin token", () =>
    readFileSync(join(dir, "allot.db.admin-token"), "utf8").trim());
  const call = async (path, body, token = admin) => {
    const res = await fetch(base + "/api/v1" + path, {
      method: body ? "POST" : "GET",
      headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" },
      body: body ? JSON.stringify(body) : undefined,
    });
    const out = await res.json();
    if (!res.ok) throw new Error(`${path}: ${res.status} ${JSON.stringify(out)}`);
    return out;
  };
  await until("both nodes", async () => (await call("/nodes")).nodes.length === 2);
  // The fake GPUs report 70% use and 20,000 MiB used (their control files), so that a running
  // job's telemetry sparklines have known values.
  for (const n of (await call("/nodes")).nodes) {
    const control = join(dir, "allot.db.local", "agents", n.name, "gpus");
    assert.ok(existsSync(control), "the fake node's control directory " + control);
    for (let i = 0; i < 8; ++i) {
      writeFileSync(join(control, `gpu${i}.util_pct`), "70\n");
      writeFileSync(join(control, `gpu${i}.mem_used_mib`), "20000\n");
    }
  }
  await call("/budgets", { path: "/lab/a", share: 3, members: ["ann"] });
  await call("/budgets", { path: "/lab/b", share: 1, members: ["bo"] });
  const ann = (await call("/tokens", { name: "ann-web", role: "user", subject: "ann" })).token;
  const bo = (await call("/tokens", { name: "bo-web", role: "user", subject: "bo" })).token;
  const submit = (token, body) => call("/jobs", { command: ["sleep", "300"], ...body }, token);
  const jobState = async (id) => (await call(`/jobs/${id}`)).state;

  // bo's job takes the whole cluster without a minimum runtime: unallocated, preemptible.
  const victim = await submit(bo, { idempotency_key: "v", name: "sweep", budget: "/lab/b",
    nodes: 2, gpus_per_node: 8, resumable: true });
  await until("the sweep to run", async () => (await jobState(victim.id)) === "running");
  // ann's funded job takes half of it back; then a second one of hers waits.
  const taker = await submit(ann, { idempotency_key: "t", name: "train", budget: "/lab/a",
    nodes: 1, gpus_per_node: 8, min_runtime: 600 });
  await until("the train job to run", async () => (await jobState(taker.id)) === "running");
  const waiter = await submit(ann, { idempotency_key: "w", name: "eval", budget: "/lab/a",
    nodes: 2, gpus_per_node: 8, kind: "interactive" });
  const queue = await until("both waiting jobs explained", async () => {
    const q = await call("/queue");
    return q.jobs.length === 2 && q.jobs.every((j) => j.code !== "not-yet-considered") && q;
  });
  const waitWhy = queue.jobs.find((j) => j.id === waiter.id);
  assert.ok(waitWhy, "the eval job waits");
  const events = (await call(`/jobs/${victim.id}/events`)).events;
  assert.ok(events.some((e) => e.reason.includes(`job ${taker.id}`)),
    "the sweep's events name the job that preempted it: " + JSON.stringify(events));

  browser = await playwright.chromium.launch({
    executablePath: chromium,
    headless: true,
    args: [...(process.getuid && process.getuid() === 0 ? ["--no-sandbox"] : []),
      "--disable-gpu", "--disable-dev-shm-usage"],
  });
  page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.on("console", (m) => { if (m.type() === "error") problems.push("console: " + m.text()); });
  page.on("pageerror", (e) => problems.push("page: " + e.message));
  const reportReads = [];
  page.on("request", (r) => { if (r.url().includes("/api/v1/report")) reportReads.push(r.url()); });
  // A refresh in flight when the test moves to another page is aborted, which is no fault.
  page.on("requestfailed", (r) => {
    if (r.failure()?.errorText !== "net::ERR_ABORTED") problems.push("request: " + r.url());
  });
  const text = (sel) => page.$eval(sel, (e) => e.textContent);
  const shot = (name) => page.screenshot({ path: join(artifacts, name + ".png"), fullPage: true });
  // A uPlot chart (div.chart[data-chart=NAME] inside `scope`): its x values, each series' label
  // and values as drawn (a stacked bar chart draws running totals: see ownValues), and how many
  // pixels of its canvas are near `colour` (#rrggbb), i.e. drawn for a series of that colour.
  const chart = (name, colour, scope = "main") => page.$eval(`${scope} div.chart[data-chart="${name}"]`,
    (host, colour) => {
      const u = host.uplot;
      if (!u) throw new Error("no uPlot instance on " + host.dataset.chart);
      const canvas = host.querySelector("canvas");
      const px = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
      const want = [1, 3, 5].map((i) => parseInt(colour.slice(i, i + 2), 16));
      let near = 0;
      for (let i = 0; i < px.length; i += 4) {
        if (px[i + 3] > 200 && want.every((c, k) => Math.abs(px[i + k] - c) < 24)) ++near;
      }
      return { x: [...u.data[0]], near, width: canvas.width, height: canvas.height,
        series: u.series.slice(1).map((s, i) => ({ label: s.label, values: [...u.data[i + 1]] })),
        legend: [...host.querySelectorAll(".u-legend .u-series .u-label")].map((l) => l.textContent) };
    }, colour);
  // A stacked bar chart's own values per series, from the running totals it draws (the series
  // in the order given to it, bottom of the stack first).
  const ownValues = (c) => Object.fromEntries(c.series.map((s, i) => [s.label, s.values.map((v, k) =>
    +(v - (i ? c.series[i - 1].values[k] : 0)).toFixed(6))]));
  const COLOUR = { allocated: "#2b6cb0", unallocated: "#d69e2e", plain: "#4a5568", share: "#c53030",
    demand: "#38a169" };
  // Present in the page, visible or not (what puppeteer's waitForSelector waited for; Playwright
  // waits for visible by default).
  const present = (sel, timeout = 30000) => page.waitForSelector(sel, { state: "attached", timeout });
  const visit = async (path, sel) => {
    await page.goto(base + path);
    await present(sel, 10000);
  };

  // Sign in: the form first, then the token, kept in this tab's sessionStorage.
  await visit("/", "#token");
  await shot("signin");
  await page.locator("#token").pressSequentially(admin);
  await page.click("#signin");
  await present("#cluster", 10000);
  assert.equal(await page.evaluate(() => document.cookie), "", "no cookie is set");
  // The event stream is open: pages refresh on changes, not every 5 s.
  await page.waitForFunction(() => document.getElementById("live").textContent === "live",
    undefined, { timeout: 10000 });
  assert.match(await text("#who"), /admin/);

  // Cluster: GPUs by state per model, and the queue by reason.
  const byModel = await text("#by-model");
  assert.match(byModel, /H100/, "the by-model table names the GPU model: " + byModel);
  // Cluster, model, then allocated, unallocated, idle, draining, down: the train job holds 8.
  const states = await page.$$eval("#by-model tbody td", (tds) => tds.map((t) => t.textContent));
  assert.deepEqual(states.slice(2), ["8", "0", "8", "0", "0"], JSON.stringify(states));
  assert.match(await text("#by-reason"), new RegExp(waitWhy.code));
  // Fragmentation, per cluster, as the API measured it: the free node's 8 GPUs are idle, and
  // the waiting jobs ask 8 per node, so none of them is stranded.
  const frag = (await call("/gpus")).clusters;
  assert.equal(frag.length, 1);
  assert.equal(frag[0].largest_waiting_per_node, 8, JSON.stringify(frag));
  const fragCells = await page.$$eval("#fragmentation tbody td", (tds) =>
    tds.map((t) => t.textContent));
  assert.deepEqual(fragCells, [frag[0].name, String(frag[0].free_gpus), "8 GPUs",
    String(frag[0].fragmented_gpus)], JSON.stringify(fragCells));
  assert.equal(fragCells[1], "8");
  // The GPUs-by-state chart: a stacked bar per model with the table's numbers, drawn.
  const byState = await chart("gpus-by-state", COLOUR.allocated);
  const own = ownValues(byState);
  assert.deepEqual([own.allocated, own.unallocated, own.idle, own.draining, own.down],
    [[8], [0], [8], [0], [0]], JSON.stringify(byState.series));
  assert.ok(byState.near > 100, "the allocated bar is drawn: " + byState.near + " pixels");
  // Its legend lists the stack bottom first (allocated at the bottom of each bar).
  assert.deepEqual(byState.legend, ["Model", "allocated", "unallocated", "idle", "draining",
    "down"], JSON.stringify(byState.legend));
  // Waiting jobs by reason: a bar per reason with the API's counts.
  const q0 = await call("/queue?limit=1");
  const byReason = await chart("queue-by-reason", COLOUR.plain);
  assert.equal(byReason.series.length, 1);
  assert.equal(byReason.series[0].values.reduce((a, v) => a + v, 0), q0.waiting,
    JSON.stringify(byReason));
  assert.ok(byReason.near > 50, "the reason bars are drawn: " + byReason.near);
  // The four metrics day by day: 7 days, and today's occupancy a percentage above 0 (the train
  // job holds 8 GPUs).
  await present('#metrics-week div.chart', 20000);
  // One read of the history for them: the last hour, and the last 7 days with a step a day
  // (not a read a day).
  assert.deepEqual(reportReads.map((u) => new URL(u).searchParams.has("step")).sort(),
    [false, true], "the cluster page reads /report twice: " + reportReads.join(" "));
  const metrics = await chart("metrics-week", "#d69e2e");
  assert.equal(metrics.x.length, 7, JSON.stringify(metrics.x));
  assert.deepEqual(metrics.series.map((m) => m.label),
    ["Availability", "Occupancy", "Impact", "Utilization"]);
  const occupancyToday = metrics.series[1].values[6];
  assert.ok(occupancyToday > 0 && occupancyToday <= 100, JSON.stringify(metrics.series));
  await shot("cluster");

  // Queue: the waiting job with its reason and rank; the running one with its class.
  await visit("/queue", "#waiting");
  const waitingText = await text("#waiting");
  assert.match(waitingText, new RegExp(`${waiter.id} eval`));
  assert.ok(waitingText.includes(waitWhy.explanation), "the reason in words: " + waitingText);
  assert.match(await text("#running"), new RegExp(`${taker.id} train.*allocated`));
  await shot("queue");
  // Live: a job submitted now shows up within a second or two, long before the 30 s refresh a
  // page makes while the stream is open (the stream says jobs changed; the page reads again).
  const late = await call("/jobs", { command: ["sleep", "300"], idempotency_key: "live",
    name: "live", budget: "/lab/a", nodes: 2, gpus_per_node: 8 });
  const t0 = Date.now();
  await page.waitForFunction((id) => document.getElementById("waiting")?.textContent
    .includes(`${id} live`), late.id, { timeout: 3000 });
  const took = Date.now() - t0;
  assert.ok(took < 3000, `the queue page showed the new job after ${took} ms`);
  await call(`/jobs/${late.id}/cancel`, {});
  await page.waitForFunction((id) => !document.getElementById("waiting")?.textContent
    .includes(`${id} live`), late.id, { timeout: 3000 });
  await shot("queue");
  // Paged: one row of each list asked, and a link to more (the page shows 100 at first).
  await visit("/queue?limit=1", "#waiting");
  assert.equal(await page.$$eval("#waiting tbody tr", (trs) => trs.length), 1);
  assert.match(await page.$eval("#more", (a) => a.getAttribute("href")), /limit=5/);
  // Filters: the interactive kind leaves only the eval job.
  await visit("/queue?kind=interactive", "#waiting");
  const rows = await page.$$eval("#waiting tbody tr", (trs) => trs.map((t) => t.textContent));
  assert.equal(rows.length, 1);
  assert.match(rows[0], /eval/);

  // Job: the waiting job says why; the preempted one links the job that took its GPUs.
  await visit(`/jobs/${waiter.id}`, "#why-code");
  assert.equal(await text("#why-code"), waitWhy.code);
  await visit(`/jobs/${taker.id}`, "#job-class");
  assert.equal(await text("#job-class"), "allocated");
  // Its telemetry sparklines: a point per agent report (every 10 s), the values the API has.
  // The agents report every 2 s here (--telemetry-ms 2000): several points, at distinct
  // times.
  await page.waitForFunction(() => document.querySelector('#spark-util div.chart')?.uplot
    ?.data[1].length >= 3, undefined, { timeout: 30000 });
  const tel = await call(`/jobs/${taker.id}/telemetry`);
  assert.ok(tel.samples.length >= 3, JSON.stringify(tel));
  const util = await chart("util", COLOUR.allocated, "#spark-util");
  const utilDots = util.series[0].values;
  assert.ok(utilDots.length >= 3 && utilDots.every((v) => v === 70), "GPU use 70%: " + utilDots);
  assert.ok(new Set(util.x).size >= 3, "points spread over time: " + util.x);
  assert.ok(util.near > 10, "the line is drawn: " + util.near);
  // GPU use now: the latest report, and each of its 8 GPUs as its node last reported it.
  assert.match(await text("#gpu-now"), /^70\.0%, 160000 of \d+ MiB/);
  const perGpu = await chart("gpu-now", COLOUR.allocated, "#gpu-now-per-gpu");
  assert.equal(perGpu.x.length, 8);
  assert.deepEqual(perGpu.series[0].values, Array(8).fill(70));
  assert.ok(perGpu.near > 50, "the per-GPU bars are drawn: " + perGpu.near);
  const memDots = (await chart("mem", COLOUR.unallocated, "#spark-mem")).series[0].values;
  assert.ok(memDots.length >= 1 && memDots.every((v) => v === 8 * 20000),
    "memory, summed over its 8 GPUs: " + memDots);
  assert.equal(tel.samples[0].mem_used_mib, 8 * 20000);
  await shot("job-telemetry");
  await visit(`/jobs/${victim.id}`, "#events");
  // Its timeline: a point per event, the preemption among the stops (red).
  const timeline = await chart("events", COLOUR.share);
  const victimEvents = (await call(`/jobs/${victim.id}/events`)).events;
  assert.equal(timeline.x.length, victimEvents.length + 1, "a point per event, then now");
  const stops = timeline.series.find((t) => t.label === "stopped").values;
  assert.ok(stops.filter((v) => v === 0).length >= 1, "the preemption is a point: " +
    JSON.stringify(timeline.series));
  assert.ok(timeline.near > 20, "the stop is drawn: " + timeline.near);
  const links = await page.$$eval("#events a", (as) => as.map((a) => a.getAttribute("href")));
  assert.ok(links.includes(`/jobs/${taker.id}`), "the preemption links its cause: " + links);
  assert.match(await text("#events"), new RegExp(`preempt.*job ${taker.id}`, "i"),
    "the preemption names the job that took the GPUs");
  await shot("job");
  await page.click(`#events a[href="/jobs/${taker.id}"]`);
  await page.waitForFunction((id) => document.querySelector("h1")?.textContent.startsWith(
    `Job ${id} `), taker.id, { timeout: 10000 });

  // Nodes: both nodes' GPUs, coloured by state (the train job holds 8, the rest are idle).
  await visit("/nodes", ".node");
  const cells = await page.$$eval(".gpu", (gs) => gs.map((g) => g.dataset.state));
  assert.equal(cells.length, 16);
  assert.equal(cells.filter((s) => s === "allocated").length, 8);
  assert.equal(cells.filter((s) => s === "idle").length, 8);
  await shot("nodes");
  // Cordoned, the free node drains: its GPUs turn draining and the row says how far it got.
  const free = (await call("/gpus")).nodes.find((n) => n.busy_gpus === 0).name;
  await call(`/nodes/${free}/cordon`, {});
  await visit("/nodes", `[data-node=${free}] .drain`);
  const drained = await page.$$eval(`[data-node=${free}] .gpu`, (gs) => gs.map((g) =>
    g.dataset.state));
  assert.deepEqual(drained, Array(8).fill("draining"));
  assert.match(await text(`[data-node=${free}] .drain`), /8\/8 free, drained/);
  await call(`/nodes/${free}/uncordon`, {});

  // Budgets: the tree, and the GPUs /lab/a holds now as a bar of the chart.
  await visit("/budgets", "#tree");
  assert.match(await text("#tree"), /\/lab\/a/);
  const heldChart = await chart("held", COLOUR.allocated);
  const held = ownValues(heldChart).allocated;
  assert.ok(held.includes(8), "a bar of 8 allocated GPUs: " + JSON.stringify(heldChart));
  assert.ok(heldChart.near > 100, "the bar is drawn: " + heldChart.near);
  // A budget's last 7 days: a bar a day, /lab/a's allocated GPU-hours today as /usage has them,
  // and its share a day as a line.
  await visit("/budgets?budget=/lab/a", "#week div.chart");
  const week = await chart("week", COLOUR.allocated);
  assert.equal(week.x.length, 7, "seven days");
  const weekOwn = ownValues({ series: week.series.filter((w) => w.label.endsWith("GPU-h")) });
  const today = weekOwn["allocated GPU-h"].filter((v) => v > 0);
  assert.equal(today.length, 1, "only today has usage: " + JSON.stringify(week.series));
  assert.ok(weekOwn["allocated GPU-h"][6] > 0, "today is the last day");
  const usage = await call(`/usage?budget=/&from=${Math.floor(Date.now() / 1000) - 86400}`);
  const gpuHours = usage.rows.find((r) => r.budget === "/lab/a").allocated_gpu_seconds / 3600;
  assert.ok(today[0] > 0 && today[0] <= gpuHours + 1e-6, `${today[0]} GPU-h, API ${gpuHours}`);
  const share = week.series.find((w) => w.label === "its share a day");
  assert.ok(share && share.values.length === 7 && share.values.every((v) => v > 0 &&
    v === share.values[0]), "the share line: " + JSON.stringify(share));
  assert.ok((await chart("week", COLOUR.share)).near > 20, "the share line is drawn");
  // Its demand a day (GPU-hours its running and waiting jobs asked for), and every bar, as the
  // report of that day alone has them (the page read the week with a step a day).
  const period = await page.$eval("#week", (e) => ({ from: Number(e.dataset.from),
    step: Number(e.dataset.step) }));
  assert.equal(period.step, 86400);
  const demand = week.series.find((w) => w.label === "demand");
  assert.ok(demand && demand.values.length === 7, "the demand line: " + JSON.stringify(week.series));
  for (let i = 0; i < 7; ++i) {
    const from = period.from + i * period.step;
    const day = (await call(`/report?from=${from}&to=${from + period.step}`)).budgets
      .find((b) => b.budget === "/lab/a");
    const near = (a, b, what) => assert.ok(Math.abs(a - b) < 1e-6, `day ${i} ${what}: ${a} vs ${b}`);
    near(demand.values[i], day.demand_gpu_seconds / 3600, "demand");
    near(weekOwn["allocated GPU-h"][i], day.allocated_gpu_seconds / 3600, "allocated");
    near(weekOwn["unallocated GPU-h"][i], day.unallocated_gpu_seconds / 3600, "unallocated");
  }
  // ann's jobs asked for 8 + 16 GPUs today: more than /lab/a held.
  assert.ok(demand.values[6] > weekOwn["allocated GPU-h"][6] && demand.values[5] === 0,
    "demand today only, above what it held: " + JSON.stringify(demand.values));
  assert.ok((await chart("week", COLOUR.demand)).near > 20, "the demand line is drawn");
  assert.deepEqual(week.legend, ["Day", "allocated GPU-h", "unallocated GPU-h", "its share a day",
    "demand"]);
  // The same over the last 24 hours by hour and the last 12 weeks by week: each bar and the
  // demand as the report of that hour or week alone has them.
  for (const [over, steps, step] of [["hours", 24, 3600], ["weeks", 12, 7 * 86400]]) {
    await page.click(`#spans a[href$="over=${over}"]`);
    await until(`the chart ${over}`, () => page.$eval("#week", (e) => Number(e.dataset.step)).then(
      (s) => s === step && page.$('#week div.chart')));
    const c = await chart("week", COLOUR.allocated);
    assert.equal(c.x.length, steps, `${steps} ${over}`);
    const from = await page.$eval("#week", (e) => Number(e.dataset.from));
    const cOwn = ownValues({ series: c.series.filter((w) => w.label.endsWith("GPU-h")) });
    const cDemand = c.series.find((w) => w.label === "demand").values;
    for (const i of [steps - 2, steps - 1]) {
      const r = (await call(`/report?from=${from + i * step}&to=${from + (i + 1) * step}`)).budgets
        .find((b) => b.budget === "/lab/a");
      const near = (a, b, what) => assert.ok(Math.abs(a - b) < 1e-6, `${over} ${i} ${what}: ${a} vs ${b}`);
      near(cDemand[i], r.demand_gpu_seconds / 3600, "demand");
      near(cOwn["allocated GPU-h"][i], r.allocated_gpu_seconds / 3600, "allocated");
    }
    assert.ok(cOwn["allocated GPU-h"][steps - 1] > 0 && cDemand[steps - 1] > 0,
      `the last ${over} has usage and demand: ` + JSON.stringify(c.series));
    await shot(`budget-${over}`);
  }
  await visit("/budgets?budget=/lab/a", "#week div.chart");
  // Each budget's rank in the fair-share order, and why, as GET /standing has it.
  await present("#ranks", 10000);
  const standing = await call("/standing");
  const labA = standing.budgets.find((b) => b.budget === "/lab/a").clusters[0];
  const rankRow = await page.$$eval("#ranks tbody tr", (trs) => trs.map((t) =>
    [...t.children].map((c) => c.textContent)).find((r) => r[0] === "/lab/a"));
  assert.ok(rankRow, "/lab/a has a rank row");
  assert.equal(rankRow[2], `${labA.rank} of ${labA.siblings}`);
  assert.equal(labA.siblings, 3);  // /lab/default (allot up makes it), /lab/a and /lab/b
  assert.match(rankRow[4], /used \+ .* promised GPU-h\) ÷ .* allocated GPU-h/, rankRow[4]);
  assert.ok(await page.$("#audit"), "the admin sees the audit log");

  // The admin changes /lab/b's share: the page previews the new fractions, then saves it.
  const editor = 'input[aria-label="share of /lab/b"]';
  await page.click(editor, { clickCount: 3 });
  await page.locator(editor).pressSequentially("2");
  const preview = await page.$eval(editor, (el) => el.parentElement.querySelector(".preview")
    .textContent);
  assert.ok(preview.includes("/lab/b: 20.0% → 33.3%") && preview.includes("/lab/a: 60.0% → 50.0%"),
    "the preview shows the new fractions: " + preview);
  await shot("budgets");
  await page.$eval(editor, (el) => el.parentElement.querySelector("button").click());
  await until("the new share", async () =>
    (await call("/budgets")).budgets.find((b) => b.path === "/lab/b").share === 2);
  const audit = await call("/budgets/audit?path=/lab/b");
  assert.ok(audit.entries.some((e) => e.field === "share" && Number(e.new) === 2),
    "the audit log has the change: " + JSON.stringify(audit.entries));
  // ...and the page's audit log shows it once it refreshes: who, which budget, old and new.
  await page.waitForFunction(() => [...document.querySelectorAll("#audit tbody tr")].some((tr) => {
    const c = [...tr.children].map((td) => td.textContent);
    return c[2] === "/lab/b" && c[3] === "share" && Number(c[5]) === 2;
  }), undefined, { timeout: 15000 });
  const auditRow = await page.$$eval("#audit tbody tr", (trs) => trs.map((t) =>
    [...t.children].map((c) => c.textContent)).find((r) => r[2] === "/lab/b" && r[3] === "share"));
  assert.equal(auditRow[1], "admin", "the audit names who changed it: " + auditRow);
  assert.equal(Number(auditRow[4]), 1, "and the old share: " + auditRow);
  await shot("budgets-audit");

  // Me, as ann: her budget and her jobs.
  await page.click("#signout");
  await present("#token");
  await page.locator("#token").pressSequentially(ann);
  await page.click("#signin");
  // Signing in again shows the page the tab was on (budgets), now as ann sees it.
  await page.waitForFunction(() => document.getElementById("who").textContent.startsWith("ann") &&
    document.getElementById("budgets"), undefined, { timeout: 10000 });
  assert.ok(!(await text("#tree")).includes("/lab/b"), "ann does not see /lab/b");
  await visit("/me", "#my-jobs");
  assert.match(await text("#my-budgets"), /\/lab\/a/);
  const mine = await text("#my-jobs");
  assert.match(mine, /train/);
  assert.match(mine, /eval/);
  assert.ok(!mine.includes("sweep"), "bo's job is not ann's");
  await shot("me");

  // A wrong token is refused with the API's reason, back at the form.
  await page.click("#signout");
  await page.locator("#token").pressSequentially("allot_wrong");
  await page.click("#signin");
  await present(".signin .error", 10000);
  problems.splice(0, problems.length, ...problems.filter((p) => !/401/.test(p)));
  assert.deepEqual(problems, [], "no console errors");
  console.log(`dashboard: every page checked; screenshots in ${artifacts}`);
} catch (e) {
  failed = true;
  console.error(e);
  if (page) {
    console.error("--- the page at " + page.url() + " ---\n" +
      (await page.$eval("main", (m) => m.innerText).catch(() => "(unreadable)")));
    await page.screenshot({ path: join(artifacts, "failure.png"), fullPage: true }).catch(() => {});
  }
  console.error("--- console ---\n" + problems.join("\n"));
  console.error("--- allot up ---\n" + upLog.slice(-4000));
} finally {
  if (browser) await browser.close();
  up.kill("SIGTERM");
  await new Promise((r) => (up.exitCode !== null ? r() : up.once("exit", r)));
  if (!failed) rmSync(dir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
