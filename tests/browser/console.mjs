// Drives the admin console in Debian's chromium (headless) for tests/browser/test_console.py:
//   node console.mjs URL TRANSACTIONAL_ID TOPIC SCREENSHOT
// waits for the transaction to appear with its partitions, takes a screenshot, aborts
// it from the page, and prints one JSON line of what it saw. Exit 1 on any failure.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [url, transactionalId, topic, screenshot] = process.argv.slice(2);
const WAIT_MS = 10_000; // bound for anything to show up (a loaded machine is slow)
const profile = mkdtempSync(join(tmpdir(), "eosbroker-chromium-"));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1280, height: 900 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"],
});
try {
  const page = await browser.newPage();
  const problems = [];
  page.on("pageerror", e => problems.push(`page error: ${e.message}`));
  page.on("console", m => { if (m.type() === "error") problems.push(`console: ${m.text()}`); });
  process.on("exit", code => { if (code) console.error(problems.join("\n")); });
  const started = Date.now();
  await page.goto(url);
  const row = page.locator(`table[data-testid="transactions"] tr[data-key="${transactionalId}"]`);
  await row.waitFor({ timeout: WAIT_MS });
  const appearedMs = Date.now() - started;
  const text = await row.innerText();
  await page.locator(`table[data-testid="partitions"] tr[data-key="${topic}-0"]`).waitFor({ timeout: WAIT_MS });
  if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
  await row.getByTestId(`abort-${transactionalId}`).click();
  try {
    await page.getByTestId("message").filter({ hasText: `${transactionalId} aborted` }).waitFor({ timeout: WAIT_MS });
  } catch (e) {
    problems.push(`message: ${await page.getByTestId("message").textContent()}`);
    throw e;
  }
  // the coordinator's state follows on the page (fenced, then aborted)
  await page.waitForFunction(
    id => !document.querySelector(`table[data-testid="transactions"] tr[data-key="${id}"] button`),
    transactionalId, { timeout: WAIT_MS });
  const after = await row.innerText();
  console.log(JSON.stringify({ appearedMs, row: text, after }));
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
