// Reads a group's offsets, lag and rebalances off the console in Debian's chromium
// (headless), and zooms and scrolls the timeline, for tests/browser/test_timeline.py:
//   node groups.mjs URL GROUP_ID SCREENSHOT [share]
// (share: a share group, read with its share-partitions instead of its offsets)
// prints one JSON line of what the page drew. Exit 1 on any failure.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [url, group, screenshot, kind] = process.argv.slice(2);
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
const windowOf = page => page.evaluate(() => {
  const s = document.querySelector('[data-testid="timeline-svg"]');
  return [Number(s.dataset.t0), Number(s.dataset.t1)];
});
try {
  const page = await browser.newPage();
  page.on("pageerror", e => problems.push(`page error: ${e.message}`));
  await page.goto(url);
  await page.locator(`[data-testid="group-rebalance"][data-group="${group}"]`).first().waitFor({ state: "attached", timeout: WAIT_MS });
  await page.locator(`table[data-testid="${kind === "share" ? "share-partitions" : "group-lag"}"] tr[data-key^="${group}|"]`)
    .first().waitFor({ timeout: WAIT_MS });
  const seen = await page.evaluate(g => ({
    lag: [...document.querySelectorAll(`table[data-testid="group-lag"] tr`)].filter(r => (r.dataset.key || "").startsWith(g + "|"))
      .map(r => [...r.children].map(c => c.textContent)),
    shares: [...document.querySelectorAll(`table[data-testid="share-partitions"] tr`)].filter(r => (r.dataset.key || "").startsWith(g + "|"))
      .map(r => [...r.children].map(c => c.textContent)),
    groupRow: [...document.querySelectorAll(`table[data-testid="groups"] tr[data-key="${g}"] td`)].map(c => c.textContent),
    rebalances: [...document.querySelectorAll(`[data-testid="group-rebalance"][data-group="${g}"]`)].map(e => e.dataset.what),
    bands: [...document.querySelectorAll(`[data-testid="group-rebalancing"][data-group="${g}"]`)].map(e => e.dataset.ended !== ""),
    commits: [...document.querySelectorAll(`[data-testid="group-commit"][data-group="${g}"]`)].map(e => [e.dataset.state, e.dataset.what]),
    committedLines: [...document.querySelectorAll(`[data-testid="committed-line"][data-group="${g}"]`)].map(e => e.dataset.partition),
    lane: [...document.querySelectorAll(`[data-testid="group-lane"][data-group="${g}"]`)].length,
  }), group);
  if (screenshot) await page.locator('[data-testid="timeline"]').screenshot({ path: screenshot });
  // the time axis: zoom in twice, scroll back, wheel out, then the whole history again
  seen.windows = { all: await windowOf(page) };
  await page.getByTestId("zoom-in").click();
  await page.getByTestId("zoom-in").click();
  seen.windows.zoomed = await windowOf(page);
  await page.getByTestId("scroll-back").click();
  seen.windows.back = await windowOf(page);
  const box = await page.locator('[data-testid="timeline-svg"]').boundingBox();
  await page.mouse.move(box.x + box.width * 0.6, box.y + 10);
  await page.mouse.wheel(0, 300);
  seen.windows.wheeled = await windowOf(page);
  await page.getByTestId("zoom-all").click();
  seen.windows.again = await windowOf(page);
  console.log(JSON.stringify(seen));
} catch (e) {
  console.error(problems.join("\n"));
  throw e;
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
if (problems.length) { console.error(problems.join("\n")); process.exit(1); }
