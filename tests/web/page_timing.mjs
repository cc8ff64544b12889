// How long each dashboard page takes in headless Chromium, from navigation until its content is
// on screen (first load of the page's data, not the 5 s refresh). Used by
// bench/dashboard_bench.sh against a server it filled.
//   node page_timing.mjs BASE_URL TOKEN [runs] [paths, comma-separated: only these pages]
import { chromium as playwright } from "playwright-core";

const [base, token, runsArg, only] = process.argv.slice(2);
const runs = Number(runsArg || 5);
const chromium = process.env.CHROMIUM || "/usr/bin/chromium";
const browser = await playwright.launch({ executablePath: chromium, headless: true,
  args: [...(process.getuid() === 0 ? ["--no-sandbox"] : []), "--disable-gpu",
    "--disable-dev-shm-usage"] });
try {
  const page = await browser.newPage();
  await page.goto(base + "/");
  await page.waitForSelector("#token");
  await page.fill("#token", token);
  await page.click("#signin");
  await page.waitForSelector("#cluster", { state: "attached", timeout: 60000 });
  const pages = [["/", "#cluster"], ["/queue", "#waiting"], ["/nodes", ".node"],
    ["/budgets", "#tree"], ["/me", "#me"], ["/jobs/1", "#events"]];
  // Asked for by path: a known page, or the queue with other parameters (?limit=500).
  const chosen = !only ? pages : only.split(",").map((p) =>
    pages.find(([k]) => k === p) || [p, p.startsWith("/queue") ? "#waiting" : "main section"]);
  for (const [path, sel] of chosen) {
    const shown = [];
    const complete = [];
    for (let i = 0; i < runs; ++i) {
      const t0 = performance.now();
      await page.goto(base + path);
      await page.waitForSelector(sel, { state: "attached", timeout: 60000 });
      shown.push(performance.now() - t0);
      // The parts read from the history (web/src/dom.ts later()) come after; the next load waits
      // for them, so that it does not queue behind this one's reads.
      await page.waitForFunction(() => !document.querySelector(".later:not(.done)"), undefined,
        { timeout: 120000 });
      complete.push(performance.now() - t0);
    }
    const median = (ms) => ms.sort((a, b) => a - b)[ms.length >> 1].toFixed(0);
    console.log(`${path.padEnd(10)} shown ${median(shown).padStart(6)} ms, ` +
      `complete ${median(complete).padStart(6)} ms (median of ${runs} loads)`);
  }
} finally {
  await browser.close();
}
