// `allot sim`'s report.html in a real headless Chromium: a short lab run's report must load with
// no console error, every chart must have data (a non-empty path), no table may overflow the page
// at 1280 px (tables scroll inside their box), hover values must be there, and the conservation
// checks must sit in a collapsed <details>. Screenshots go to the artifacts dir.
//
//   node sim_report.test.mjs <path to the allot binary> [artifacts dir]
// Exit 0: passed; 77: skipped (no chromium); anything else: failed.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import assert from "node:assert/strict";

const SKIP = 77;
const allotBin = process.argv[2];
const artifacts = process.argv[3] || join(tmpdir(), "allot-sim-report-artifacts");
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

const dir = mkdtempSync(join(tmpdir(), "allot-sim-report-"));
mkdirSync(artifacts, { recursive: true });
let browser;
const problems = [];
let failed = false;
try {
  execFileSync(allotBin, ["sim", "--workload", "lab", "--days", "2", "--quiet", "--out", dir],
    { stdio: ["ignore", "ignore", "inherit"] });
  const report = join(dir, "report.html");
  const html = readFileSync(report, "utf8");
  assert.ok(!/https?:\/\/(?!www\.w3\.org\/2000\/svg)/.test(html), "nothing downloaded");

  browser = await playwright.chromium.launch({
    executablePath: chromium,
    headless: true,
    args: [...(process.getuid && process.getuid() === 0 ? ["--no-sandbox"] : []),
      "--disable-gpu", "--disable-dev-shm-usage"],
  });
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("console", (m) => { if (m.type() === "error") problems.push("console: " + m.text()); });
  page.on("pageerror", (e) => problems.push("page: " + e.message));
  page.on("requestfailed", (r) => problems.push("request: " + r.url()));
  await page.goto(pathToFileURL(report).href, { waitUntil: "load" });

  const facts = await page.evaluate(() => {
    const charts = [...document.querySelectorAll("svg")].map((svg) => ({
      title: svg.querySelector("text")?.textContent || "(untitled)",
      // A line or area with at least two points, or a bar wider than nothing.
      data: [...svg.querySelectorAll("path")].some((p) => (p.getAttribute("d") || "").includes("L")) ||
        [...svg.querySelectorAll("rect[fill]:not([fill='none'])")].some((r) => r.getBBox().width > 1 && !r.closest(".hover")),
    }));
    const page = document.documentElement.clientWidth;
    const tables = [...document.querySelectorAll("table")].map((t) => {
      const box = t.parentElement;
      return {
        head: t.querySelector("tr")?.textContent.slice(0, 60),
        scrolls: box.classList.contains("scroll"),
        right: Math.max(box.getBoundingClientRect().right, t.classList.length ? 0 : 0),
      };
    });
    const details = [...document.querySelectorAll("details")].map((d) => ({
      open: d.open, summary: d.querySelector("summary")?.textContent,
    }));
    return {
      charts, tables, details, page,
      scrollWidth: document.documentElement.scrollWidth,
      hovers: document.querySelectorAll(".hover rect title").length,
      headings: [...document.querySelectorAll("h2")].map((h) => h.textContent),
      text: document.body.innerText,
    };
  });
  assert.ok(facts.charts.length >= 10, `charts: ${facts.charts.length}`);
  const empty = facts.charts.filter((c) => !c.data).map((c) => c.title);
  assert.deepEqual(empty, [], "every chart has data");
  for (const t of facts.tables) {
    assert.ok(t.scrolls, `table "${t.head}" sits in a scrolling box`);
    assert.ok(t.right <= facts.page + 0.5, `table "${t.head}" ends at ${t.right} > ${facts.page}`);
  }
  assert.ok(facts.scrollWidth <= facts.page, `the page scrolls sideways: ${facts.scrollWidth}`);
  assert.ok(facts.hovers > 100, `hover values: ${facts.hovers}`);
  for (const h of ["Comparison", "Budgets across policies", "Allocation against usage, per budget"]) {
    assert.ok(facts.headings.includes(h), `section "${h}" in ${JSON.stringify(facts.headings)}`);
  }
  assert.ok(facts.details.length >= 4, "conservation checks per run in <details>");
  for (const d of facts.details) {
    assert.ok(!d.open && /Conservation checks: all \d+ passed/.test(d.summary), JSON.stringify(d));
  }
  assert.match(facts.text, /owed almost nothing: less than 5\.0% of the mean/);

  // Screenshots: the top (comparison), the per-budget comparison and one budget's charts.
  await page.screenshot({ path: join(artifacts, "sim-report-full.png"), fullPage: true });
  const shoot = async (name, selector) => {
    const el = await page.$(selector);
    assert.ok(el, selector);
    await el.screenshot({ path: join(artifacts, name + ".png") });
  };
  await page.evaluate(() => {
    // Wrap each named section (h2 up to the next h2) so it can be captured on its own.
    for (const h of document.querySelectorAll("h2")) {
      const box = document.createElement("section");
      box.id = "s-" + h.textContent.replace(/[^a-z]+/gi, "-").toLowerCase();
      h.before(box);
      box.append(h);
      while (box.nextSibling && box.nextSibling.tagName !== "H2" &&
             !(box.nextSibling.tagName === "P" && box.nextSibling.style.color)) {
        box.append(box.nextSibling);
      }
    }
  });
  await shoot("sim-report-budgets", "#s-budgets-across-policies");
  await page.evaluate(() => {
    // Only the first budget of the time series, to keep the picture small.
    const s = document.querySelector("#s-allocation-against-usage-per-budget");
    const h3 = s.querySelectorAll("h3");
    for (let i = 1; i < h3.length; ++i) { h3[i].nextElementSibling.remove(); h3[i].remove(); }
  });
  await shoot("sim-report-allocation", "#s-allocation-against-usage-per-budget");
  assert.deepEqual(problems, [], "no console errors");
  console.log(`sim report: ${facts.charts.length} charts, ${facts.tables.length} tables checked; ` +
    `screenshots in ${artifacts}`);
} catch (e) {
  failed = true;
  console.error(e);
  console.error("--- console ---\n" + problems.join("\n"));
} finally {
  if (browser) await browser.close();
  rmSync(dir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
