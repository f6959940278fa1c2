/**
 * The operator dashboard in headless Chromium (driven by playwright-core) against the real local
 * fleet, after repeated requests through the edge: the page must show both workers and a nonzero
 * hit rate read from the DOM; the screenshot goes to a temporary folder, or, with
 * KVEDGE_UPDATE_SCREENSHOTS=1, to docs/img/dashboard.png (a test run leaves the checkout as it was).
 * Also: the token is POSTed once for an expiring HttpOnly cookie (never in a URL); no session, no data.
 * The browser arrives with `npm ci`: @sparticuz/chromium ships a compressed Chromium build inside
 * the npm package (unpacked to /tmp on first use). KVEDGE_CHROMIUM names another binary; Debian's
 * /usr/bin/chromium is the fallback. With none runnable the test skips with a printed reason,
 * except under CI=true, where it is required.
 */
import { existsSync, mkdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium, type Browser } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../scripts/local-fleet.ts";
import { requireInCi } from "../helpers/required.ts";

const SCREENSHOT = process.env.KVEDGE_UPDATE_SCREENSHOTS === "1" ? join(import.meta.dirname, "../../docs/img/dashboard.png") : join(tmpdir(), `kvedge-dashboard-${process.pid}.png`);
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];

/** The first Chromium that starts: KVEDGE_CHROMIUM, the npm-shipped build, Debian's. */
async function launchChromium(): Promise<{ browser: Browser | null; tried: string[] }> {
  const tried: string[] = [];
  const candidates: (() => Promise<string>)[] = [];
  if (process.env.KVEDGE_CHROMIUM) candidates.push(async () => process.env.KVEDGE_CHROMIUM!);
  candidates.push(async () => (await import("@sparticuz/chromium")).default.executablePath());
  if (existsSync("/usr/bin/chromium")) candidates.push(async () => "/usr/bin/chromium");
  for (const exe of candidates) {
    try {
      return { browser: await chromium.launch({ executablePath: await exe(), args: ARGS }), tried };
    } catch (e) {
      tried.push((e as Error).message.split("\n")[0]!);
    }
  }
  return { browser: null, tried };
}

const launched = await launchChromium();
const haveBrowser = requireInCi(launched.browser !== null, "a runnable Chromium", `none started (${launched.tried.join("; ")})`);

let fleet: Fleet;
let browser: Browser;

beforeAll(async () => {
  if (!haveBrowser) return;
  browser = launched.browser!;
  fleet = await startFleet({ workers: 2, log: process.env.KVEDGE_E2E_LOGS ? (l) => console.log(l) : undefined });
});
afterAll(async () => {
  await launched.browser?.close();
  await fleet?.stop();
});

function prompt(seed: number): string {
  const words = ["video", "frame", "image", "cache", "prefix", "worker", "edge", "route"];
  let x = seed * 7919;
  const out = [`Conversation ${seed}:`];
  for (let i = 0; i < 400; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    out.push(words[x % words.length]!);
  }
  return out.join(" ");
}

async function chat(seed: number): Promise<number> {
  const body = { model: fleet.model, messages: [{ role: "user", content: prompt(seed) }], max_tokens: 8 };
  const r = await fetch(`${fleet.edgeUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const j = (await r.json()) as { usage: { prompt_tokens_details?: { cached_tokens?: number } } };
  expect(r.status).toBe(200);
  return j.usage.prompt_tokens_details?.cached_tokens ?? 0;
}

describe.skipIf(!haveBrowser)("dashboard", () => {
  it("renders two workers and a nonzero hit rate from the live fleet", async () => {
    // Six conversations, then three more rounds of the same ones: the repeats hit the cache.
    for (let s = 1; s <= 6; s++) await chat(s);
    let cached = 0;
    for (let round = 0; round < 3; round++) for (let s = 1; s <= 6; s++) cached += await chat(s);
    expect(cached).toBeGreaterThan(0);

    const context = await browser.newContext({ viewport: { width: 1360, height: 900 }, deviceScaleFactor: 1 });
    const page = await context.newPage();
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    page.on("console", (m) => {
      if (m.type() === "error") errors.push(m.text());
    });
    const t0 = Date.now();
    // Sign in as an operator does: the token goes into the form (POST), never into a URL.
    expect((await page.goto(`${fleet.edgeUrl}/dashboard`))?.status()).toBe(401);
    // Chromium logs that deliberate 401 as a console error ("Failed to load resource"); only what
    // the signed-in dashboard logs counts.
    errors.length = 0;
    await page.fill('input[name="token"]', fleet.adminToken);
    const [nav] = await Promise.all([page.waitForNavigation(), page.click('button[type="submit"]')]);
    expect(nav?.status()).toBe(200);
    expect(new URL(page.url()).pathname).toBe("/dashboard");
    await page.waitForSelector('body[data-ready="1"]', { state: "attached", timeout: 15_000 }).catch((e: unknown) => {
      throw new Error(`dashboard never rendered: ${String(e)}; page errors: ${JSON.stringify(errors)}`);
    });
    const loadMs = Date.now() - t0;

    // No token in the address bar; the session cookie is HttpOnly (invisible to scripts) and expires.
    expect(new URL(page.url()).search).toBe("");
    expect(await page.evaluate<string>("document.cookie")).not.toContain("kvedge_admin");
    const cookie = (await context.cookies()).find((c) => c.name === "kvedge_admin");
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: "Strict" });
    expect(cookie!.expires).toBeGreaterThan(Date.now() / 1000);
    expect(cookie!.expires).toBeLessThanOrEqual(Date.now() / 1000 + 12 * 3600 + 60);

    // Wait until every settle has reached the index (they run after the responses).
    await page.waitForFunction('Number(document.getElementById("requests").getAttribute("data-value")) >= 24', null, { timeout: 10_000 });
    const rows = await page.$$eval("#workers tbody tr[data-worker]", (trs) => trs.map((tr) => [...tr.querySelectorAll("td")].map((td) => td.textContent ?? "")));
    expect(rows.map((r) => r[0]).sort()).toEqual(fleet.workers.map((w) => w.id).sort());
    for (const r of rows) expect(r[1]).toBe("up");
    const hitRate = Number(await page.getAttribute("#hit-rate", "data-value"));
    expect(hitRate).toBeGreaterThan(0);
    expect(await page.textContent("#hit-rate")).toMatch(/^\d+\.\d%$/);
    expect(Number(await page.getAttribute("#workers-up", "data-value"))).toBe(2);
    expect(Number(await page.getAttribute("#index-blocks", "data-value"))).toBeGreaterThan(0);
    const overview = (await fleet.admin("/admin/overview")) as { models: { cohort: { state: string } }[] };
    console.log(`/admin/overview: ${JSON.stringify(overview).length} bytes of JSON`);
    expect(await page.getAttribute("#cohort", "data-value")).toBe(overview.models[0]!.cohort.state);
    const decisions = await page.$$eval("#decisions tbody tr", (trs) => trs.map((tr) => tr.textContent ?? ""));
    expect(decisions.length).toBeGreaterThanOrEqual(20);
    expect(decisions.some((d) => /longest cached prefix/.test(d))).toBe(true);
    expect(await page.$$eval("#chart polyline", (ls) => ls.length)).toBeGreaterThan(0);
    expect(errors).toEqual([]);

    mkdirSync(join(SCREENSHOT, ".."), { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
    const size = statSync(SCREENSHOT).size;
    console.log(`dashboard: ready ${loadMs} ms after navigation (incl. token→cookie redirect), hit rate ${(hitRate * 100).toFixed(1)}%, screenshot ${size} bytes`);
    expect(size).toBeGreaterThan(20_000);
    if (process.env.KVEDGE_UPDATE_SCREENSHOTS !== "1") rmSync(SCREENSHOT);
    await context.close();
  });

  it("without a session the page and its data are refused", async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    const res = await page.goto(`${fleet.edgeUrl}/dashboard`);
    expect(res?.status()).toBe(401);
    expect(await page.$('input[name="token"]')).not.toBeNull();
    // A token in the URL is refused, even the right one; a wrong one in the form is refused.
    expect((await page.goto(`${fleet.edgeUrl}/dashboard?token=${fleet.adminToken}`))?.status()).toBe(400);
    expect((await context.cookies()).find((c) => c.name === "kvedge_admin")).toBeUndefined();
    await page.goto(`${fleet.edgeUrl}/dashboard`);
    await page.fill('input[name="token"]', "wrong-token-wrong-token");
    const [bad] = await Promise.all([page.waitForNavigation(), page.click('button[type="submit"]')]);
    expect(bad?.status()).toBe(401);
    const data = await page.evaluate(async () => (await fetch("/admin/overview")).status);
    expect(data).toBe(401);
    await context.close();
  });
});
