/**
 * SSRF policy: which destinations a media fetch may reach. Only global unicast addresses pass;
 * everything a server could use to reach itself, its network or its cloud's metadata service is
 * refused, including IPv6 forms that embed an IPv4 address. Hostnames are checked by name here
 * (runtimes without DNS, e.g. workerd) and by every resolved address where a resolver exists.
 * A local-development allowlist (explicit, empty by default) lets named destinations through.
 */
import { cidrContains, endsInNumber, formatIp, parseCidr, parseIpv4, parseIpv6, type Cidr, type IpAddress } from "./ip-address.ts";
import { stripTrailing } from "../util/strip-trailing.ts";

export type BlockCategory =
  | "unspecified"
  | "loopback"
  | "private"
  | "cgnat"
  | "link_local"
  | "metadata"
  | "multicast"
  | "broadcast"
  | "reserved"
  | "documentation"
  | "benchmarking"
  | "protocol_assignments"
  | "ipv4_mapped"
  | "ipv4_compatible"
  | "ipv4_translated"
  | "nat64_local"
  | "nat64_embedded"
  | "6to4_embedded"
  | "teredo"
  | "unique_local"
  | "site_local"
  | "not_global_unicast"
  | "local_name"
  | "single_label_name"
  | "invalid_host";

const block = (cidr: string, category: BlockCategory): [Cidr, BlockCategory] => [parseCidr(cidr)!, category];

/** Checked in order; the first match names the category. */
const V4_BLOCKS: [Cidr, BlockCategory][] = [
  block("169.254.169.254/32", "metadata"), // AWS, GCP, Azure, OpenStack, DigitalOcean …
  block("168.63.129.16/32", "metadata"), // Azure WireServer (a public address used as host plumbing)
  block("100.100.100.200/32", "metadata"), // Alibaba Cloud
  block("192.0.0.192/32", "metadata"), // Oracle Cloud (legacy)
  block("0.0.0.0/8", "unspecified"),
  block("10.0.0.0/8", "private"),
  block("100.64.0.0/10", "cgnat"),
  block("127.0.0.0/8", "loopback"),
  block("169.254.0.0/16", "link_local"),
  block("172.16.0.0/12", "private"),
  block("192.0.0.0/24", "protocol_assignments"),
  block("192.0.2.0/24", "documentation"),
  block("192.88.99.0/24", "reserved"), // deprecated 6to4 relay anycast
  block("192.168.0.0/16", "private"),
  block("198.18.0.0/15", "benchmarking"),
  block("198.51.100.0/24", "documentation"),
  block("203.0.113.0/24", "documentation"),
  block("224.0.0.0/4", "multicast"),
  block("255.255.255.255/32", "broadcast"),
  block("240.0.0.0/4", "reserved"),
];

const V6_METADATA = [parseCidr("fd00:ec2::254/128")!]; // AWS IMDS over IPv6
const V6_BLOCKS: [Cidr, BlockCategory][] = [
  block("::/128", "unspecified"),
  block("::1/128", "loopback"),
  block("::ffff:0:0/96", "ipv4_mapped"),
  block("::ffff:0:0:0/96", "ipv4_translated"), // SIIT
  block("::/96", "ipv4_compatible"),
  block("64:ff9b:1::/48", "nat64_local"),
  block("100::/64", "reserved"), // discard-only
  block("2001::/32", "teredo"), // embeds an (obfuscated) IPv4 client: refuse outright
  block("2001::/23", "protocol_assignments"),
  block("2001:db8::/32", "documentation"),
  block("3fff::/20", "documentation"),
  block("5f00::/16", "reserved"), // SRv6 SIDs
  block("fc00::/7", "unique_local"),
  block("fe80::/10", "link_local"),
  block("fec0::/10", "site_local"),
  block("ff00::/8", "multicast"),
];
const NAT64_WKP = parseCidr("64:ff9b::/96")!;
const SIX_TO_FOUR = parseCidr("2002::/16")!;
const GLOBAL_UNICAST = parseCidr("2000::/3")!;

/** Why an address may not be contacted, or null when it is a global unicast address. */
export function blockedAddressCategory(a: IpAddress): BlockCategory | null {
  if (a.family === 4) {
    for (const [c, cat] of V4_BLOCKS) if (cidrContains(c, a)) return cat;
    return null;
  }
  if (V6_METADATA.some((c) => cidrContains(c, a))) return "metadata";
  // Prefixes that carry an IPv4 address: the embedded address decides.
  if (cidrContains(NAT64_WKP, a)) {
    return blockedAddressCategory({ family: 4, value: Number(a.value & 0xffffffffn) }) ? "nat64_embedded" : null;
  }
  if (cidrContains(SIX_TO_FOUR, a)) {
    return blockedAddressCategory({ family: 4, value: Number((a.value >> 80n) & 0xffffffffn) }) ? "6to4_embedded" : null;
  }
  for (const [c, cat] of V6_BLOCKS) if (cidrContains(c, a)) return cat;
  return cidrContains(GLOBAL_UNICAST, a) ? null : "not_global_unicast";
}

/** Suffixes (and exact names) that only make sense inside a private network or on the host itself. */
const LOCAL_NAME_SUFFIXES = [
  "localhost",
  "local",
  "localdomain",
  "internal",
  "intranet",
  "private",
  "corp",
  "home",
  "lan",
  "home.arpa",
  "in-addr.arpa",
  "ip6.arpa",
  "metadata.goog",
  "svc", // Kubernetes service names (`redis.default.svc`)
  "consul", // Consul service discovery
];
const LOCAL_NAMES = new Set(["metadata", "instance-data", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]);

/**
 * Lower-cases and strips every trailing dot: `127.0.0.1..` and `localhost...` must be judged as
 * `127.0.0.1` and `localhost` (resolvers and some URL parsers drop the dots; the policy must not
 * see a different host than the connection does).
 */
export function normalizeHostname(host: string): string {
  return stripTrailing(host.toLowerCase(), ".");
}

export type HostClass =
  | { kind: "ip"; address: IpAddress; canonical: string; blocked: BlockCategory | null }
  | { kind: "name"; name: string; blocked: BlockCategory | null };

/**
 * Classifies a URL host as written (raw) or as the WHATWG parser normalised it. A numeric-looking
 * last label must be an IPv4 literal, otherwise the host is invalid (WHATWG refuses it too).
 */
export function classifyHost(host: string): HostClass {
  const h = normalizeHostname(host);
  if (h.includes(":") || h.startsWith("[")) {
    const v = parseIpv6(h);
    if (v === null) return { kind: "name", name: h, blocked: "invalid_host" };
    const address: IpAddress = { family: 6, value: v };
    return { kind: "ip", address, canonical: formatIp(address), blocked: blockedAddressCategory(address) };
  }
  if (endsInNumber(h)) {
    const v = parseIpv4(h);
    if (v === null) return { kind: "name", name: h, blocked: "invalid_host" };
    const address: IpAddress = { family: 4, value: v };
    return { kind: "ip", address, canonical: formatIp(address), blocked: blockedAddressCategory(address) };
  }
  if (h === "" || h.includes("%") || /[\s/\\@#?]/.test(h)) return { kind: "name", name: h, blocked: "invalid_host" };
  if (LOCAL_NAMES.has(h)) return { kind: "name", name: h, blocked: "local_name" };
  for (const s of LOCAL_NAME_SUFFIXES) if (h === s || h.endsWith("." + s)) return { kind: "name", name: h, blocked: "local_name" };
  // Single-label names resolve through search domains to intranet hosts.
  if (!h.includes(".")) return { kind: "name", name: h, blocked: "single_label_name" };
  return { kind: "name", name: h, blocked: null };
}

/** Local-development allowlist entries: "127.0.0.1:8080", "[::1]:8080", "localhost:8080", "10.0.0.0/8", "media.test". */
export interface AllowRule {
  cidr: Cidr | null;
  host: string | null;
  port: number | null;
}

export function parseAllowRule(entry: string): AllowRule {
  const e = entry.trim().toLowerCase();
  if (e.includes("/")) {
    const cidr = parseCidr(e);
    if (!cidr) throw new Error(`allowlist entry "${entry}" is not a CIDR`);
    return { cidr, host: null, port: null };
  }
  let host = e;
  let port: number | null = null;
  const m = /^\[([^\]]+)\](?::(\d+))?$/.exec(e) ?? (e.split(":").length === 2 ? /^([^:]+):(\d+)$/.exec(e) : null);
  if (m) {
    host = m[1]!;
    port = m[2] === undefined ? null : Number(m[2]);
    if (port !== null && (port < 1 || port > 65535)) throw new Error(`allowlist entry "${entry}": bad port`);
  }
  if (host === "") throw new Error(`allowlist entry "${entry}" is empty`);
  const cidr = parseCidr(host);
  return cidr ? { cidr, host: null, port } : { cidr: null, host: normalizeHostname(host), port };
}

export class Allowlist {
  readonly rules: readonly AllowRule[];
  constructor(entries: readonly string[] = []) {
    this.rules = entries.map(parseAllowRule);
  }
  get empty(): boolean {
    return this.rules.length === 0;
  }
  /** Is this destination explicitly allowed? `address` is the literal or resolved address, if known. */
  allows(dest: { hostname: string; port: number; address?: IpAddress | null }): boolean {
    const name = normalizeHostname(dest.hostname);
    for (const r of this.rules) {
      if (r.port !== null && r.port !== dest.port) continue;
      if (r.host !== null && r.host === name) return true;
      if (r.cidr !== null && dest.address && cidrContains(r.cidr, dest.address)) return true;
    }
    return false;
  }
}

export function defaultPort(protocol: string): number {
  return protocol === "https:" ? 443 : 80;
}
