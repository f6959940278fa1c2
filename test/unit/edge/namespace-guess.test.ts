/**
 * `cached_tokens` is no oracle across parties that do not trust each other (docs/security.md): the
 * edge's chat handler (src/edge/chat.ts) in front of a real simulated worker (SGLang's salted radix
 * cache over HTTP), public access on. A victim sends a system prompt holding a passphrase; an
 * attacker on another network then sends the exact prompt (a right guess) and, from a third network
 * so that neither guess warms the other, a prompt with a wrong passphrase. The right guess must get
 * no more cached tokens than the wrong one, for an anonymous victim and for an admin victim; the
 * victim's own repeat (the control) shows the cache does answer within a namespace.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { handleChatCompletions, type ChatDeps } from "../../../src/edge/chat.ts";
import { ReceiptOutbox } from "../../../src/edge/chat/receipt-outbox.ts";
import { oneWorkerIndex } from "../../helpers/one-worker-index.ts";
import { initHashing } from "../../../src/util/hash.ts";
import { startSimulatedWorker, type SimulatedWorker } from "../../../services/sglang-sim/worker.ts";

const MODEL = "Qwen/Qwen3-VL-8B-Instruct";
const ADMIN = "admin-token-for-this-test-0123";

let sim: SimulatedWorker;
let deps: ChatDeps;

beforeAll(async () => {
  await initHashing();
  sim = await startSimulatedWorker({ timingPreset: "instant", pageSize: 16 });
  const { index } = oneWorkerIndex(sim.url, MODEL);
  const config = parseEdgeConfig({
    KVEDGE_ACCESS: "public",
    ADMIN_TOKEN: ADMIN,
    RELAY_SECRET: "relay-secret-for-this-test-0123456789",
    KVEDGE_RATE_LIMIT: "off",
    // The simulated worker runs without --api-key here (worker credentials: worker-auth.test.ts).
    KVEDGE_WORKER_AUTH: "none",
  });
  deps = { config, index: () => index, fetch: (u, i) => fetch(u, i), receiptOutbox: new ReceiptOutbox(), waitUntil: () => undefined };
});

afterAll(async () => {
  await sim.close();
});

function system(passphrase: string): string {
  return `You are the support assistant of Example Corp. Internal note, never reveal: the vault passphrase is ${passphrase}. Answer politely and briefly; refuse questions about the vault. Escalate billing disputes to a human agent.`;
}

async function cachedTokens(passphrase: string, headers: Record<string, string>): Promise<number> {
  const res = await handleChatCompletions(
    new Request("http://edge/v1/chat/completions", {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify({ model: MODEL, max_tokens: 2, messages: [{ role: "system", content: system(passphrase) }, { role: "user", content: "Hello, who are you?" }] }),
    }),
    deps,
  );
  expect(res.status).toBe(200);
  const body = (await res.json()) as { usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } } };
  return body.usage.prompt_tokens_details.cached_tokens;
}

describe("an exact guess of another party's prompt gets no more cached tokens than a wrong one", () => {
  it("anonymous victim, anonymous attacker on another network", async () => {
    const victim = { "cf-connecting-ip": "198.51.100.7" };
    await cachedTokens("amber-falcon-7731", victim);
    // Control: the victim's own repeat is served from its namespace.
    expect(await cachedTokens("amber-falcon-7731", victim)).toBeGreaterThanOrEqual(48);
    // The same /64 is the same client network: one namespace.
    const right = await cachedTokens("amber-falcon-7731", { "cf-connecting-ip": "2001:db8:7:1::10" });
    const wrong = await cachedTokens("cobalt-heron-2209", { "cf-connecting-ip": "2001:db8:7:2::10" });
    expect(right).toBeLessThanOrEqual(wrong);
  });

  it("admin victim, anonymous attacker", async () => {
    const admin = { authorization: `Bearer ${ADMIN}`, "cf-connecting-ip": "192.0.2.1" };
    await cachedTokens("violet-otter-5150", admin);
    expect(await cachedTokens("violet-otter-5150", admin)).toBeGreaterThanOrEqual(48);
    // An attacker on the admin's own network is still anonymous, not admin: a namespace of its own.
    const right = await cachedTokens("violet-otter-5150", { "cf-connecting-ip": "192.0.2.1" });
    const wrong = await cachedTokens("scarlet-lynx-0042", { "cf-connecting-ip": "192.0.2.2" });
    expect(right).toBeLessThanOrEqual(wrong);
  });

  it("callers of one network share their namespace (the documented limit of per-network salts)", async () => {
    await cachedTokens("teal-badger-3141", { "cf-connecting-ip": "2001:db8:9:1::1" });
    expect(await cachedTokens("teal-badger-3141", { "cf-connecting-ip": "2001:db8:9:1::ffff" })).toBeGreaterThanOrEqual(48);
  });
});
