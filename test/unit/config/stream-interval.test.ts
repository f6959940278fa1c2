import { describe, expect, it } from "vitest";
import { ConfigError } from "../../../src/api/errors.ts";
import { parseEdgeConfig, parseRoutingVar } from "../../../src/config/config.ts";

describe("KVEDGE_ROUTING.streamInterval", () => {
  it("is unset by default and taken when in 1..64", () => {
    expect(parseEdgeConfig({}).routing.streamInterval).toBeUndefined();
    expect(parseEdgeConfig({ KVEDGE_ROUTING: '{"streamInterval":1}' }).routing.streamInterval).toBe(1);
    expect(parseEdgeConfig({ KVEDGE_ROUTING: '{"streamInterval":64}' }).routing.streamInterval).toBe(64);
    expect(parseRoutingVar('{"streamInterval":4}').streamInterval).toBe(4);
  });

  it.each([0, 65, 2.5, -1, '"4"', "null"])("refuses %s, naming the field", (bad) => {
    const env = { KVEDGE_ROUTING: `{"streamInterval":${bad}}` };
    expect(() => parseEdgeConfig(env)).toThrow(ConfigError);
    expect(() => parseEdgeConfig(env)).toThrow(/KVEDGE_ROUTING\.streamInterval/);
    expect(() => parseRoutingVar(env.KVEDGE_ROUTING)).toThrow(/streamInterval/);
  });
});
