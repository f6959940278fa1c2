import { describe, expect, it } from "vitest";
import { ConfigError } from "../../../src/api/errors.ts";
import { parseEdgeConfig, parseRoutingVar } from "../../../src/config/config.ts";
import { DEFAULT_DUPLICATE_COST } from "../../../src/selection/duplicate-cost.ts";

describe("KVEDGE_ROUTING.duplicateWeight / duplicateTargetMs (src/selection/duplicate-cost.ts)", () => {
  it("default to the term's own defaults and are taken in range (0 turns the term off)", () => {
    const r = parseRoutingVar(undefined);
    expect({ weight: r.duplicateWeight, targetMs: r.duplicateTargetMs }).toEqual(DEFAULT_DUPLICATE_COST);
    expect(parseRoutingVar('{"duplicateWeight":0,"duplicateTargetMs":2500}')).toMatchObject({ duplicateWeight: 0, duplicateTargetMs: 2500 });
    expect(parseEdgeConfig({ KVEDGE_ROUTING: '{"duplicateWeight":10}' }).routing.duplicateWeight).toBe(10);
  });

  it.each([
    ["duplicateWeight", -0.1],
    ["duplicateWeight", 10.5],
    ["duplicateWeight", '"1"'],
    ["duplicateTargetMs", -1],
    ["duplicateTargetMs", 1.5],
    ["duplicateTargetMs", 600_001],
  ])("refuses %s = %s, naming the field", (field, bad) => {
    const env = { KVEDGE_ROUTING: `{"${field}":${bad}}` };
    expect(() => parseEdgeConfig(env)).toThrow(ConfigError);
    expect(() => parseEdgeConfig(env)).toThrow(new RegExp(`KVEDGE_ROUTING\\.${field}`));
    expect(() => parseRoutingVar(env.KVEDGE_ROUTING)).toThrow(new RegExp(field));
  });
});
