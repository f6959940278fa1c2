/** An unknown model's 404 echoes the start of the name, never a long one whole (the name is the client's text). */
import { describe, expect, it } from "vitest";
import { parseEdgeConfig } from "../../../src/config/config.ts";
import { resolveModel } from "../../../src/edge/chat/resolve-model.ts";

const config = parseEdgeConfig({ KVEDGE_ACCESS: "public", KVEDGE_RATE_LIMIT: "off", KVEDGE_WORKER_AUTH: "none" });

const refusal = (name: string) => {
  try {
    resolveModel(config, name);
  } catch (e) {
    return e as { message: string; code: string; param: string };
  }
  throw new Error(`${name} resolved`);
};

describe("unknown model 404", () => {
  it("a short name is echoed whole", () => {
    expect(refusal("nope")).toMatchObject({ code: "model_not_found", param: "model", message: "The model 'nope' does not exist." });
  });

  it("a long name is cut to its first 64 characters", () => {
    const name = "a".repeat(64) + "b".repeat(100_000);
    const e = refusal(name);
    expect(e.message).toBe(`The model '${"a".repeat(64)}...' does not exist.`);
  });
});
