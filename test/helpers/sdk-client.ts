/** The `openai` SDK pointed at a local fleet's edge, as the SDK e2e suites use it. */
import OpenAI from "openai";
import { afterAll, beforeAll } from "vitest";
import { startFleet, type Fleet, type FleetOptions } from "../../scripts/local-fleet.ts";

/** No retries, so each test sees the edge's first answer; `headers` go on every request. */
export function sdkClient(fleet: Fleet, headers?: Record<string, string>): OpenAI {
  return new OpenAI({ baseURL: `${fleet.edgeUrl}/v1`, apiKey: "unused", maxRetries: 0, ...(headers ? { defaultHeaders: headers } : {}) });
}

/**
 * A fleet started before the calling suite's tests and stopped after them; `ready` gets it and an
 * SDK client of its edge. KVEDGE_E2E_LOGS=1 prints the fleet's logs.
 */
export function sdkFleet(opts: FleetOptions, ready: (fleet: Fleet, client: OpenAI) => void): void {
  let fleet: Fleet | undefined;
  beforeAll(async () => {
    fleet = await startFleet({ log: process.env.KVEDGE_E2E_LOGS ? (l: string) => console.log(l) : undefined, ...opts });
    ready(fleet, sdkClient(fleet));
  });
  afterAll(async () => {
    await fleet?.stop();
  });
}
