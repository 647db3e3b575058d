// Drives the admin console of a broker served with --admin-token, for
// tests/browser/test_console.py:  node console_token.mjs URL TOKEN RULE_ID
// The page asks for the token (a wrong one is refused), then shows the fault rule with
// its firing count and moves the broker's clock one hour with its clock control. Prints
// one JSON line of what it saw and every URL the page requested. Exit 1 on any failure.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [url, token, ruleId] = process.argv.slice(2);
const WAIT_MS = 10_000;
const profile = mkdtempSync(join(tmpdir(), "eosbroker-chromium-"));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"],
});
try {
  const page = await browser.newPage();
  const problems = [];
  const urls = [];
  const cookies = [];
  page.on("pageerror", e => problems.push(`page error: ${e.message}`));
  page.on("request", r => urls.push(r.url()));
  process.on("exit", code => { if (code) console.error(problems.join("\n")); });
  await page.goto(url);
  const login = page.getByTestId("login");
  await login.waitFor({ state: "visible", timeout: WAIT_MS });
  await page.getByTestId("token").fill(token + "-wrong");
  await page.getByTestId("login-submit").click();
  await page.getByTestId("login-error").filter({ hasText: "wrong token" }).waitFor({ timeout: WAIT_MS });
  await page.getByTestId("token").fill(token);
  await page.getByTestId("login-submit").click();
  await login.waitFor({ state: "hidden", timeout: WAIT_MS });
  const rule = page.locator(`table[data-testid="faults"] tr[data-key="rule-${ruleId}"]`);
  await rule.waitFor({ timeout: WAIT_MS });
  const ruleText = await rule.innerText();
  const nodes = await page.locator('table[data-testid="nodes"] tbody tr').count();
  await page.getByTestId("clock-by").fill("1h");
  await page.getByTestId("clock-advance").click();
  await page.getByTestId("message").filter({ hasText: "clock advanced by 1h" }).waitFor({ timeout: WAIT_MS });
  await page.getByTestId("clock").filter({ hasText: "1.0 h ahead" }).waitFor({ timeout: WAIT_MS });
  // a reload keeps the token for this tab: no second prompt
  await page.reload();
  await rule.waitFor({ timeout: WAIT_MS });
  const promptedAgain = await login.isVisible();
  cookies.push(...(await browser.cookies()));
  console.log(JSON.stringify({ ruleText, nodes, promptedAgain, urls, cookies: cookies.length }));
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
