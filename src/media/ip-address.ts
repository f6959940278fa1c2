/**
 * IP literal parsing in every spelling a URL host can carry. IPv4 follows the WHATWG URL host
 * parser (1-4 dot-separated parts, each decimal, octal with a leading 0, or hex with 0x; the last
 * part fills the remaining bytes; one trailing dot allowed), which is also inet_aton's grammar, so
 * `2130706433`, `0177.0.0.1`, `0x7f.1` and `127.1` all mean 127.0.0.1. IPv6 is RFC 4291 text with
 * `::` compression and an optional dotted IPv4 tail; zone ids are refused by the caller.
 */

export type IpAddress = { family: 4; value: number } | { family: 6; value: bigint };

function parseIpv4Part(s: string): number | null {
  if (s === "") return null;
  let radix = 10;
  let digits = s;
  if (/^0[xX]/.test(s)) {
    radix = 16;
    digits = s.slice(2);
    if (digits === "") return 0; // WHATWG: "0x" alone is zero
  } else if (s.length > 1 && s[0] === "0") {
    radix = 8;
    digits = s.slice(1);
  }
  const re = radix === 16 ? /^[0-9a-fA-F]+$/ : radix === 8 ? /^[0-7]+$/ : /^[0-9]+$/;
  if (!re.test(digits)) return null;
  // Parts can be arbitrarily long ("0x00000000007f"); parse in BigInt and cap.
  const v = BigInt(radix === 16 ? "0x" + digits : radix === 8 ? "0o" + digits : digits);
  return v > 0xffffffffn ? Number.POSITIVE_INFINITY : Number(v);
}

/** Does the host's last label look numeric (WHATWG "ends in a number")? Then it must parse as IPv4. */
export function endsInNumber(host: string): boolean {
  const parts = host.split(".");
  if (parts.length > 1 && parts[parts.length - 1] === "") parts.pop();
  const last = parts[parts.length - 1] ?? "";
  return /^[0-9]+$/.test(last) || /^0[xX][0-9a-fA-F]*$/.test(last);
}

/** IPv4 as an unsigned 32-bit number, or null when `host` is not an IPv4 literal in any spelling. */
export function parseIpv4(host: string): number | null {
  const parts = host.split(".");
  if (parts.length > 1 && parts[parts.length - 1] === "") parts.pop();
  if (parts.length < 1 || parts.length > 4) return null;
  const nums: number[] = [];
  for (const p of parts) {
    const n = parseIpv4Part(p);
    if (n === null) return null;
    nums.push(n);
  }
  const last = nums.pop()!;
  for (const n of nums) if (n > 255) return null;
  if (last >= 256 ** (5 - parts.length)) return null;
  let v = last;
  for (let i = 0; i < nums.length; i++) v += nums[i]! * 256 ** (3 - i);
  return v >>> 0;
}

/** Strict dotted-quad with decimal parts (used inside IPv6 text, where other spellings are invalid). */
function parseDottedQuadStrict(s: string): number | null {
  const parts = s.split(".");
  if (parts.length !== 4) return null;
  let v = 0;
  for (const p of parts) {
    if (!/^[0-9]{1,3}$/.test(p)) return null;
    const n = Number(p);
    if (n > 255) return null;
    v = v * 256 + n;
  }
  return v;
}

/** IPv6 as a 128-bit BigInt, or null. Accepts optional surrounding brackets; refuses zone ids. */
export function parseIpv6(text: string): bigint | null {
  let s = text;
  if (s.startsWith("[") && s.endsWith("]")) s = s.slice(1, -1);
  if (s.includes("%") || !s.includes(":")) return null;
  const groups: number[] = [];
  let tail = s;
  let v4: number | null = null;
  const lastColon = s.lastIndexOf(":");
  if (s.slice(lastColon + 1).includes(".")) {
    v4 = parseDottedQuadStrict(s.slice(lastColon + 1));
    if (v4 === null) return null;
    tail = s.slice(0, lastColon);
    if (tail.endsWith(":")) tail += ":"; // "::1.2.3.4" keeps its "::"
  }
  const dbl = tail.indexOf("::");
  if (dbl !== -1 && tail.indexOf("::", dbl + 1) !== -1) return null;
  const parseGroups = (part: string): number[] | null => {
    if (part === "") return [];
    const out: number[] = [];
    for (const g of part.split(":")) {
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return null;
      out.push(parseInt(g, 16));
    }
    return out;
  };
  const want = v4 === null ? 8 : 6;
  if (dbl === -1) {
    const g = parseGroups(tail);
    if (!g || g.length !== want) return null;
    groups.push(...g);
  } else {
    const head = parseGroups(tail.slice(0, dbl));
    const rest = parseGroups(tail.slice(dbl + 2));
    if (!head || !rest || head.length + rest.length > want - 1) return null;
    groups.push(...head, ...new Array<number>(want - head.length - rest.length).fill(0), ...rest);
  }
  if (v4 !== null) groups.push(v4 >>> 16, v4 & 0xffff);
  let v = 0n;
  for (const g of groups) v = (v << 16n) | BigInt(g);
  return v;
}

/** Parses an IP literal (v4 in any spelling, v6 with or without brackets). */
export function parseIp(text: string): IpAddress | null {
  const v6 = parseIpv6(text);
  if (v6 !== null) return { family: 6, value: v6 };
  const v4 = parseIpv4(text);
  return v4 === null ? null : { family: 4, value: v4 };
}

export function formatIpv4(v: number): string {
  return [v >>> 24, (v >>> 16) & 255, (v >>> 8) & 255, v & 255].join(".");
}

export function formatIp(a: IpAddress): string {
  if (a.family === 4) return formatIpv4(a.value);
  const g: string[] = [];
  for (let i = 7; i >= 0; i--) g.push(((a.value >> BigInt(i * 16)) & 0xffffn).toString(16));
  return g.join(":");
}

export interface Cidr {
  family: 4 | 6;
  base: bigint;
  prefix: number;
}

/** "10.0.0.0/8", "fd00::/8", or a bare address (a /32 or /128). Canonical spellings only. */
export function parseCidr(text: string): Cidr | null {
  const slash = text.indexOf("/");
  const addr = slash === -1 ? text : text.slice(0, slash);
  const isV6 = addr.includes(":");
  const base = isV6 ? parseIpv6(addr) : parseDottedQuadStrict(addr);
  if (base === null) return null;
  const max = isV6 ? 128 : 32;
  let prefix = max;
  if (slash !== -1) {
    const p = text.slice(slash + 1);
    if (!/^[0-9]{1,3}$/.test(p)) return null;
    prefix = Number(p);
    if (prefix > max) return null;
  }
  return { family: isV6 ? 6 : 4, base: BigInt(base), prefix };
}

export function cidrContains(c: Cidr, a: IpAddress): boolean {
  if (c.family !== a.family) return false;
  const bits = c.family === 4 ? 32 : 128;
  const shift = BigInt(bits - c.prefix);
  return BigInt(a.value) >> shift === c.base >> shift;
}
