// Reads the console's transaction timeline in Debian's chromium (headless) for
// tests/browser/test_timeline.py:
//   node timeline.mjs URL TRANSACTIONAL_ID PARTITION SCREENSHOT [LOG_SCREENSHOT]
// waits for the id's bar, a fault event and the LSO gap the id holds on PARTITION
// (topic-index), then shows PARTITION in the log browser, and prints one JSON line of
// what the page drew. Exit 1 on any failure.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [url, transactionalId, partition, screenshot, logScreenshot] = process.argv.slice(2);
const WAIT_MS = 10_000; // bound for anything to show up (a loaded machine is slow)
const profile = mkdtempSync(join(tmpdir(), "eosbroker-chromium-"));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1280, height: 900 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"],
});
const problems = [];
try {
  const page = await browser.newPage();
  page.on("pageerror", e => problems.push(`page error: ${e.message}`));
  await page.goto(url);
  const gap = `[data-testid="lso-gap"][data-partition="${partition}"][data-held-by="${transactionalId}"]`;
  await page.locator(gap).first().waitFor({ state: "attached", timeout: WAIT_MS });
  await page.locator('[data-testid="timeline-event"][data-kind="fault"]').first().waitFor({ state: "attached", timeout: WAIT_MS });
  const seen = await page.evaluate(([id, gapSelector]) => ({
    bars: [...document.querySelectorAll('[data-testid="txn-bar"]')].map(b => ({
      id: b.dataset.tid, outcome: b.dataset.outcome, partitions: b.dataset.partitions,
      title: b.querySelector("title").textContent })),
    faults: [...document.querySelectorAll('[data-testid="timeline-event"][data-kind="fault"]')].map(e => e.dataset.what),
    controls: [...document.querySelectorAll('[data-testid="timeline-event"][data-kind="control"]')].map(e => e.dataset.what),
    markers: [...document.querySelectorAll('[data-testid="txn-marker"]')].map(m => m.querySelector("title").textContent),
    gaps: [...document.querySelectorAll(gapSelector)].map(g => g.querySelector("title").textContent),
  }), [transactionalId, gap]);
  if (screenshot) await page.locator('[data-testid="timeline"]').screenshot({ path: screenshot });
  // the log browser on the same partition, from offset 0
  const [topic, index] = [partition.slice(0, partition.lastIndexOf("-")), Number(partition.slice(partition.lastIndexOf("-") + 1))];
  await page.getByTestId("log-partition").selectOption(JSON.stringify([topic, index]));
  await page.getByTestId("log-show").click();
  await page.locator('[data-testid="record"]').first().waitFor({ timeout: WAIT_MS });
  seen.log = await page.evaluate(() => ({
    records: [...document.querySelectorAll('[data-testid="record"]')].map(r => ({
      offset: Number(r.dataset.offset), read_committed: r.dataset.readCommitted,
      value: r.children[4].textContent, decoration: getComputedStyle(r.children[4]).textDecorationLine,
      opacity: getComputedStyle(r.children[4]).opacity })),
    controls: [...document.querySelectorAll('[data-testid="control-batch"]')].map(c => c.textContent),
  }));
  if (logScreenshot) await page.locator('table[data-testid="log"]').screenshot({ path: logScreenshot });
  console.log(JSON.stringify(seen));
} catch (e) {
  console.error(problems.join("\n"));
  throw e;
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
if (problems.length) { console.error(problems.join("\n")); process.exit(1); }
