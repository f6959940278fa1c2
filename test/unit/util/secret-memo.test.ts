// SecretMemo derives each message's value once per secret, and forgets everything when the secret changes or it is full.
import { describe, expect, it } from "vitest";
import { SecretMemo } from "../../../src/util/secret-memo.ts";

describe("SecretMemo", () => {
  it("derives a message once per secret, again after the secret changes or the memo fills", () => {
    const calls: string[] = [];
    const memo = new SecretMemo(2, (secret, message) => {
      calls.push(`${secret}:${message}`);
      return { of: `${secret}:${message}` };
    });
    const a = memo.get("s1", "a");
    expect(memo.get("s1", "a")).toBe(a);
    memo.get("s1", "b");
    expect(calls).toEqual(["s1:a", "s1:b"]);
    // Full (2 held): the next lookup starts over, so "a" is derived again.
    expect(memo.get("s1", "a")).not.toBe(a);
    expect(memo.get("s2", "a")).toEqual({ of: "s2:a" });
    expect(memo.get("s2", "a")).toEqual({ of: "s2:a" });
    expect(calls).toEqual(["s1:a", "s1:b", "s1:a", "s2:a"]);
  });
});
