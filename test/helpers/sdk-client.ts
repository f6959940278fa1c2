/** The `openai` SDK pointed at a local fleet's edge, as the SDK e2e suites use it. */
import OpenAI from "openai";
import type { Fleet } from "../../scripts/local-fleet.ts";

/** No retries, so each test sees the edge's first answer; `headers` go on every request. */
export function sdkClient(fleet: Fleet, headers?: Record<string, string>): OpenAI {
  return new OpenAI({ baseURL: `${fleet.edgeUrl}/v1`, apiKey: "unused", maxRetries: 0, ...(headers ? { defaultHeaders: headers } : {}) });
}
