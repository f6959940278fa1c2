/**
 * Differential test of the hand-written IP parsing and address classes (src/media/ip-address.ts,
 * ssrf.ts) against ipaddr.js, a widely used library:
 * - IPv4 in every spelling both accept (1–4 parts; decimal, octal, hex per part): same address;
 * - IPv6 in compressed, full and dotted-tail text: same 128-bit value;
 * - classes: every address ipaddr.js puts in a special range is refused by our policy, except
 *   ranges that are public unicast by design (listed below with why); and every address we refuse
 *   that ipaddr.js calls plain unicast is covered by one of our stricter rules (listed).
 * Known, deliberate grammar differences are pinned at the end.
 */
import fc from "fast-check";
import ipaddr from "ipaddr.js";
import { describe, expect, it } from "vitest";
import { cidrContains, parseCidr, parseIpv4, parseIpv6, type IpAddress } from "../../../src/media/ip-address.ts";
import { blockedAddressCategory } from "../../../src/media/ssrf.ts";

const RUNS = 4000;

const v4 = (n: number): IpAddress => ({ family: 4, value: n >>> 0 });
const v6 = (n: bigint): IpAddress => ({ family: 6, value: n });

function spellPart(v: number, radix: "dec" | "hex" | "HEX" | "oct"): string {
  if (radix === "dec") return String(v);
  if (radix === "oct") return v === 0 ? "0" : "0" + v.toString(8);
  const h = v.toString(16);
  return radix === "hex" ? "0x" + h : "0X" + h.toUpperCase();
}

/** A spelling of `value` with `parts` parts (the last fills the remaining bytes, as inet_aton). */
function spellV4(value: number, parts: 1 | 2 | 3 | 4, radices: ("dec" | "hex" | "HEX" | "oct")[]): string {
  const bytes = [value >>> 24, (value >>> 16) & 255, (value >>> 8) & 255, value & 255];
  const head = bytes.slice(0, parts - 1);
  const tail = bytes.slice(parts - 1).reduce((a, b) => a * 256 + b, 0);
  return [...head, tail].map((p, i) => spellPart(p, radices[i % radices.length]!)).join(".");
}

const radix = fc.constantFrom("dec" as const, "hex" as const, "HEX" as const, "oct" as const);

/** ipaddr.js classes that are ordinary public unicast for a media fetch (not refused by design). */
function publicByDesign(range: string, a: IpAddress): boolean {
  if (range === "as112" || range === "amt") return true; // anycast DNS sinks, multicast tunnelling relays: public
  if (range === "as112v6" && a.family === 6 && cidrContains(parseCidr("2620:4f:8000::/48")!, a)) return true;
  // NAT64 (64:ff9b::/96) and 6to4 embed an IPv4 address: we refuse exactly when that address is refused.
  if ((range === "rfc6052" || range === "6to4") && a.family === 6) {
    if (cidrContains(parseCidr("64:ff9b:1::/48")!, a)) return false;
    const embedded = range === "6to4" ? Number((a.value >> 80n) & 0xffffffffn) : Number(a.value & 0xffffffffn);
    return blockedAddressCategory(v4(embedded)) === null;
  }
  return false;
}

/** Our refusals beyond ipaddr.js's special ranges, each deliberate. */
const OURS_STRICTER = new Set(["metadata", "ipv4_compatible", "not_global_unicast", "reserved", "nat64_local", "documentation", "protocol_assignments"]);

function theirRange(a: IpAddress): string {
  if (a.family === 4) return ipaddr.IPv4.parse(String(a.value >>> 0)).range();
  const hex = a.value.toString(16).padStart(32, "0").match(/.{4}/g)!.join(":");
  return ipaddr.IPv6.parse(hex).range();
}

function checkClass(a: IpAddress): void {
  const ours = blockedAddressCategory(a);
  const theirs = theirRange(a);
  const where = `${a.family === 4 ? ipaddr.IPv4.parse(String(a.value)).toString() : ipaddr.IPv6.parse(a.value.toString(16).padStart(32, "0").match(/.{4}/g)!.join(":")).toString()}: ours ${ours}, ipaddr.js ${theirs}`;
  if (theirs !== "unicast" && !publicByDesign(theirs, a)) expect(ours, where).not.toBeNull();
  if (ours !== null && theirs === "unicast") expect(OURS_STRICTER.has(ours), where).toBe(true);
}

/** Addresses near every special range of either side (and anywhere), for the class property. */
const V4_EDGES = ["0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4", "192.175.48.0/24", "192.31.196.0/24", "192.52.193.0/24", "168.63.129.16/32", "100.100.100.200/32", "255.255.255.255/32"].map((c) => parseCidr(c)!);
const V6_EDGES = ["::/96", "::ffff:0:0/96", "::ffff:0:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001::/32", "2001:2::/48", "2001:db8::/32", "2002::/16", "2620:4f:8000::/48", "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8", "fd00:ec2::254/128", "2000::/3"].map((c) => parseCidr(c)!);

const nearV4 = fc.tuple(fc.constantFrom(...V4_EDGES), fc.integer({ min: 0, max: 0xffffffff }), fc.integer({ min: -2, max: 2 })).map(([c, r, d]) => {
  const host = 32 - c.prefix;
  const off = host === 0 ? 0 : r % 2 ** host;
  return v4(Number(c.base) + off + d);
});
const nearV6 = fc.tuple(fc.constantFrom(...V6_EDGES), fc.bigInt({ min: 0n, max: (1n << 128n) - 1n })).map(([c, r]) => {
  const host = BigInt(128 - c.prefix);
  return v6(c.base + (host === 0n ? 0n : r % (1n << host)));
});

describe("ip-address.ts vs ipaddr.js", () => {
  it(`IPv4 spellings (1–4 parts, decimal/octal/hex): the same address (${RUNS} runs)`, () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 0xffffffff }), fc.constantFrom(1 as const, 2 as const, 3 as const, 4 as const), fc.array(radix, { minLength: 4, maxLength: 4 }), (value, parts, radices) => {
        const s = spellV4(value, parts, radices);
        const theirs = ipaddr.IPv4.parse(s).toByteArray().reduce((a, b) => a * 256 + b, 0);
        expect(parseIpv4(s), s).toBe(theirs);
        expect(theirs, s).toBe(value);
      }),
      { numRuns: RUNS },
    );
  });

  it("strings ipaddr.js refuses as IPv4 are refused by us too (octets over 255, bad octal digits, junk)", () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[0-9a-fx.]{1,18}$/), (s) => {
        let theirs: number | null;
        try {
          theirs = ipaddr.IPv4.isValid(s) ? ipaddr.IPv4.parse(s).toByteArray().reduce((a, b) => a * 256 + b, 0) : null;
        } catch {
          theirs = null;
        }
        const ours = parseIpv4(s);
        // We follow WHATWG (one trailing dot, a bare "0x"); ipaddr.js does not accept those.
        if (s.endsWith(".") || /(^|\.)0x(\.|$)/.test(s)) return;
        expect(ours, s).toBe(theirs);
      }),
      { numRuns: RUNS },
    );
  });

  it(`IPv6 text (compressed, full, dotted tail): the same 128-bit value (${RUNS} runs)`, () => {
    fc.assert(
      fc.property(fc.oneof(nearV6, fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }).map(v6)), fc.constantFrom("short", "full", "dotted"), (a, form) => {
        const hex = a.value.toString(16).padStart(32, "0").match(/.{4}/g)!.join(":");
        const addr = ipaddr.IPv6.parse(hex);
        let text = form === "short" ? addr.toString() : addr.toNormalizedString();
        if (form === "dotted") {
          const b = addr.toByteArray();
          text = `${addr.parts.slice(0, 6).map((p) => p.toString(16)).join(":")}:${b.slice(12).join(".")}`;
        }
        const theirs = BigInt("0x" + ipaddr.IPv6.parse(text).toByteArray().map((x) => x.toString(16).padStart(2, "0")).join(""));
        expect(parseIpv6(text), text).toBe(theirs);
        expect(parseIpv6(`[${text}]`), text).toBe(a.value);
      }),
      { numRuns: RUNS },
    );
  });

  it(`classes: IPv4 near every special range and anywhere (${RUNS} runs)`, () => {
    fc.assert(fc.property(fc.oneof(nearV4, fc.integer({ min: 0, max: 0xffffffff }).map(v4)), (a) => checkClass(a)), { numRuns: RUNS });
  });

  it(`classes: IPv6 near every special range and anywhere (${RUNS} runs)`, () => {
    fc.assert(fc.property(fc.oneof(nearV6, fc.bigInt({ min: 0n, max: (1n << 128n) - 1n }).map(v6)), (a) => checkClass(a)), { numRuns: RUNS });
  });

  it("pins the deliberate grammar differences", () => {
    // "::a.b.c.d": RFC 4291 IPv4-compatible (ours); ipaddr.js reads it as IPv4-mapped. Both refused.
    expect(parseIpv6("::127.0.0.1")).toBe(0x7f000001n);
    expect(ipaddr.IPv6.parse("::127.0.0.1").isIPv4MappedAddress()).toBe(true);
    expect(blockedAddressCategory(v6(0x7f000001n))).toBe("ipv4_compatible");
    // WHATWG trailing dot and a bare "0x" part: URL hosts carry them; ipaddr.js refuses them.
    expect(parseIpv4("127.0.0.1.")).toBe(0x7f000001);
    expect(ipaddr.IPv4.isValid("127.0.0.1.")).toBe(false);
    expect(parseIpv4("0x.0.0.1")).toBe(1);
  });
});
