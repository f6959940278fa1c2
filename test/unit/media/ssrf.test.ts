/**
 * SSRF policy, table-driven: every spelling of a refused destination is refused, both as the URL
 * is written (through the WHATWG parser the fetch itself uses) and as a raw host string through
 * our own parser (inet_aton grammar), and public destinations pass.
 */
import { describe, expect, it } from "vitest";
import { MediaError, MediaTooLargeError } from "../../../src/media/errors.ts";
import { parseDataUrl } from "../../../src/media/data-url.ts";
import { formatIp, parseIp, parseIpv4, parseIpv6 } from "../../../src/media/ip-address.ts";
import { SafeFetcher, type FetchLike, type PinnedDestination } from "../../../src/media/safe-fetch.ts";
import { Allowlist, classifyHost } from "../../../src/media/ssrf.ts";

const fetcher = new SafeFetcher();

/** [url as a client might send it, why it must be refused]. */
const REFUSED: [string, string][] = [
  ["http://127.0.0.1/", "loopback"],
  ["http://127.1/", "short form"],
  ["http://127.0.1/", "three-part form"],
  ["http://2130706433/", "decimal"],
  ["http://0x7f000001/", "hex integer"],
  ["http://0x7f.1/", "hex short form"],
  ["http://0x7f.0x0.0x0.0x1/", "hex per part"],
  ["http://0177.0.0.1/", "octal"],
  ["http://0177.1/", "octal short form"],
  ["http://00000177.0.0.01/", "zero-padded octal"],
  ["http://127.000.000.001/", "zero-padded"],
  ["http://127.0.0.1./", "trailing dot"],
  ["http://127.0.0.1../", "two trailing dots"],
  ["http://127.0.0.1.../", "three trailing dots"],
  ["http://2130706433../", "decimal, trailing dots"],
  ["http://0x7f.1../", "hex short form, trailing dots"],
  ["http://10.0.0.1..../", "private, trailing dots"],
  ["http://169.254.169.254../latest/meta-data/", "metadata, trailing dots"],
  ["http://localhost../", "localhost, two trailing dots"],
  ["http://redis.default.svc/", "Kubernetes service name"],
  ["http://vault.service.consul./", "Consul name, trailing dot"],
  ["http://metadata.google.internal../", "metadata name, trailing dots"],
  ["http://127.0.0.1%2e/", "percent-encoded trailing dot"],
  ["http://%31%32%37.0.0.1/", "percent-encoded digits"],
  ["http://１２７.０.０.１/", "fullwidth digits (IDNA maps them)"],
  ["http://127.0.\t0.1/", "tab inside the host (stripped by the parser)"],
  ["http://[::1]/", "IPv6 loopback"],
  ["http://[0:0:0:0:0:0:0:1]/", "IPv6 loopback, long form"],
  ["http://[::ffff:127.0.0.1]/", "IPv4-mapped, dotted"],
  ["http://[::ffff:7f00:1]/", "IPv4-mapped, hex"],
  ["http://[0000:0000:0000:0000:0000:ffff:7f00:0001]/", "IPv4-mapped, zero-padded"],
  ["http://[::ffff:a9fe:a9fe]/", "IPv4-mapped metadata"],
  ["http://[::ffff:10.0.0.1]/", "IPv4-mapped private"],
  ["http://[::127.0.0.1]/", "IPv4-compatible"],
  ["http://[::ffff:0:7f00:1]/", "IPv4-translated (SIIT)"],
  ["http://[64:ff9b::7f00:1]/", "NAT64 of loopback"],
  ["http://[64:ff9b::10.0.0.1]/", "NAT64 of private"],
  ["http://[64:ff9b::a9fe:a9fe]/", "NAT64 of metadata"],
  ["http://[2002:7f00:1::1]/", "6to4 of loopback"],
  ["http://[2002:c0a8:101::1]/", "6to4 of private"],
  ["http://[2001::1]/", "Teredo"],
  ["http://localhost/", "localhost"],
  ["http://LOCALHOST./", "localhost, upper case + trailing dot"],
  ["http://media.localhost/", "*.localhost"],
  ["http://0.0.0.0/", "unspecified"],
  ["http://0/", "unspecified, single number"],
  ["http://[::]/", "IPv6 unspecified"],
  ["http://10.0.0.1/", "private 10/8"],
  ["http://10.1/", "private, short form"],
  ["http://172.16.0.1/", "private 172.16/12"],
  ["http://172.31.255.255/", "private 172.16/12 top"],
  ["http://192.168.1.1/", "private 192.168/16"],
  ["http://3232235777/", "private, decimal"],
  ["http://100.64.0.1/", "CGNAT"],
  ["http://100.127.255.254/", "CGNAT top"],
  ["http://169.254.169.254/latest/meta-data/", "cloud metadata"],
  ["http://0xa9fea9fe/", "cloud metadata, hex"],
  ["http://2852039166/", "cloud metadata, decimal"],
  ["http://0251.0376.0251.0376/", "cloud metadata, octal"],
  ["http://[fd00:ec2::254]/", "AWS IMDS IPv6"],
  ["http://metadata.google.internal/computeMetadata/v1/", "GCP metadata name"],
  ["http://metadata/", "bare metadata name"],
  ["http://100.100.100.200/", "Alibaba metadata"],
  ["http://168.63.129.16/", "Azure WireServer"],
  ["http://169.254.1.1/", "link-local"],
  ["http://[fe80::1]/", "IPv6 link-local"],
  ["http://[fc00::1]/", "unique local"],
  ["http://[fec0::1]/", "site-local"],
  ["http://[ff02::1]/", "IPv6 multicast"],
  ["http://224.0.0.1/", "multicast"],
  ["http://239.255.255.250/", "multicast SSDP"],
  ["http://255.255.255.255/", "broadcast"],
  ["http://240.0.0.1/", "reserved"],
  ["http://198.18.0.1/", "benchmarking"],
  ["http://192.0.2.1/", "documentation"],
  ["http://[2001:db8::1]/", "IPv6 documentation"],
  ["http://kubernetes.default.svc/", "cluster name"],
  ["http://printer.local/", "mDNS"],
  ["http://db.internal/", "*.internal"],
  ["http://intranet/", "single-label name"],
  ["http://user@127.0.0.1/", "userinfo"],
  ["http://example.com@127.0.0.1/", "userinfo naming a public host"],
  ["http://a:b@example.com/", "credentials for a public host"],
  ["http://127.0.0.1#@example.com/", "fragment trick"],
  ["http://127.0.0.1\\@example.com/", "backslash trick"],
  ["http://127.0.0.1:80:80/", "bad port"],
  ["http://0x7g.0.0.1/", "numeric-looking invalid host"],
  ["https://[::1]:443/", "https loopback"],
  ["file:///etc/passwd", "file scheme"],
  ["gopher://127.0.0.1:6379/_INFO", "gopher scheme"],
  ["ftp://example.com/a.png", "ftp scheme"],
  ["javascript:alert(1)", "javascript scheme"],
  ["//127.0.0.1/", "relative URL"],
];

const ALLOWED = [
  "http://example.com/a.png",
  "https://media.example.com:8443/v.mp4?x=1",
  "http://93.184.216.34/",
  "http://8.8.8.8/",
  "http://0127.0.0.1/", // octal 0127 = 87: the parser (and the fetch) go to 87.0.0.1, a public address
  "http://[2606:4700:4700::1111]/",
  "http://[64:ff9b::808:808]/", // NAT64 of a public address
  "http://[2002:808:808::1]/", // 6to4 of a public address
  "http://xn--nxasmq6b.com/",
];

describe("SSRF: refused destinations", () => {
  it("the table has at least 40 spellings", () => {
    expect(REFUSED.length).toBeGreaterThanOrEqual(40);
  });

  for (const [url, why] of REFUSED) {
    it(`refuses ${JSON.stringify(url)} (${why})`, () => {
      let err: unknown = null;
      try {
        fetcher.checkUrl(url);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(MediaError);
      expect(["blocked_address", "bad_scheme", "bad_url", "credentials_in_url"]).toContain((err as MediaError).reason);
    });
  }

  it("classifies raw host spellings (our parser) like the normalised ones (WHATWG)", () => {
    const raw = [
      "127.1", "0x7f.1", "0177.0.0.1", "2130706433", "127.000.000.001", "0x7F000001", "127.0.0.1.", "0177.0.0.01",
      "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "::1", "0:0:0:0:0:0:0:1", "[0:0::1]", "10.1", "0xa9.0xfe.0xa9.0xfe",
      "169.254.43518", "0251.254.169.254", "[fd00:ec2:0:0:0:0:0:254]", "[64:ff9b::127.0.0.1]",
    ];
    for (const h of raw) {
      const c = classifyHost(h);
      expect(c.blocked, h).not.toBeNull();
      if (!h.includes(":") && !h.startsWith("[")) {
        const normalised = new URL(`http://${h}/`).hostname;
        expect(classifyHost(normalised).blocked, `${h} → ${normalised}`).not.toBeNull();
        expect(c.kind === "ip" ? c.canonical : null).toBe(normalised);
      }
    }
  });

  it("names the category", () => {
    expect(classifyHost("169.254.169.254").blocked).toBe("metadata");
    expect(classifyHost("[fd00:ec2::254]").blocked).toBe("metadata");
    expect(classifyHost("100.64.1.1").blocked).toBe("cgnat");
    expect(classifyHost("[::ffff:8.8.8.8]").blocked).toBe("ipv4_mapped");
    expect(classifyHost("[64:ff9b::a00:1]").blocked).toBe("nat64_embedded");
    expect(classifyHost("[2002:a00:1::]").blocked).toBe("6to4_embedded");
    expect(classifyHost("metadata.google.internal").blocked).toBe("local_name");
    expect(classifyHost("example.com").blocked).toBeNull();
  });
});

describe("SSRF: public destinations pass the static check", () => {
  for (const url of ALLOWED) {
    it(`allows ${url}`, () => {
      expect(() => fetcher.checkUrl(url)).not.toThrow();
    });
  }
});

describe("IP literal parsing", () => {
  it("parses every IPv4 spelling the URL standard allows", () => {
    const lo = 0x7f000001;
    for (const s of ["127.0.0.1", "127.1", "127.0.1", "2130706433", "0x7f000001", "0x7f.1", "0177.0.0.1", "0177.1", "0x7f.0.0.1", "127.0.0.1."]) {
      expect(parseIpv4(s), s).toBe(lo);
    }
    expect(parseIpv4("0x")).toBe(0);
    expect(parseIpv4("256.0.0.1")).toBeNull();
    expect(parseIpv4("1.2.3.4.5")).toBeNull();
    expect(parseIpv4("4294967296")).toBeNull();
    expect(parseIpv4("4294967295")).toBe(0xffffffff);
    expect(parseIpv4("1.16777216")).toBeNull();
    expect(parseIpv4("08.0.0.1")).toBeNull(); // 8 is not an octal digit
    expect(parseIpv4("example.com")).toBeNull();
  });

  it("parses IPv6 text forms and refuses malformed ones", () => {
    expect(parseIpv6("::1")).toBe(1n);
    expect(parseIpv6("[::]")).toBe(0n);
    expect(parseIpv6("::ffff:1.2.3.4")).toBe(0xffff01020304n);
    expect(parseIpv6("1:2:3:4:5:6:1.2.3.4")).toBe(0x000100020003000400050006_01020304n);
    expect(parseIpv6("1::")).toBe(1n << 112n);
    expect(parseIpv6("1:2:3:4:5:6:7:8")).toBe(0x00010002000300040005000600070008n);
    for (const bad of ["1:2:3:4:5:6:7:8:9", "1::2::3", ":1::2", "12345::", "::1.2.3", "::1.2.3.256", "fe80::1%eth0", "1:2:3:4:5:6:7::8:9"]) {
      expect(parseIpv6(bad), bad).toBeNull();
    }
    expect(formatIp(parseIp("::ffff:127.0.0.1")!)).toBe("0:0:0:0:0:ffff:7f00:1");
  });
});

describe("allowlist (local development)", () => {
  it("is off by default and matches host:port, CIDR and names exactly", () => {
    expect(new Allowlist().empty).toBe(true);
    const a = new Allowlist(["127.0.0.1:8080", "10.0.0.0/8", "[::1]:9000", "localhost:7000", "media.test"]);
    const ip = (s: string) => parseIp(s);
    expect(a.allows({ hostname: "127.0.0.1", port: 8080, address: ip("127.0.0.1") })).toBe(true);
    expect(a.allows({ hostname: "127.0.0.1", port: 8081, address: ip("127.0.0.1") })).toBe(false);
    expect(a.allows({ hostname: "10.9.8.7", port: 1, address: ip("10.9.8.7") })).toBe(true);
    expect(a.allows({ hostname: "[::1]", port: 9000, address: ip("::1") })).toBe(true);
    expect(a.allows({ hostname: "localhost", port: 7000 })).toBe(true);
    expect(a.allows({ hostname: "localhost", port: 7001 })).toBe(false);
    expect(a.allows({ hostname: "MEDIA.TEST.", port: 1 })).toBe(true);
    expect(() => new Allowlist(["10.0.0.0/33"])).toThrow();
  });

  it("lets an allowlisted loopback port through the static check, and nothing else", () => {
    const f = new SafeFetcher({ allowlist: ["127.0.0.1:8080"] });
    expect(() => f.checkUrl("http://127.0.0.1:8080/a.png")).not.toThrow();
    expect(() => f.checkUrl("http://2130706433:8080/a.png")).not.toThrow(); // the same destination
    expect(() => f.checkUrl("http://127.0.0.1:8081/a.png")).toThrow(MediaError);
    expect(() => f.checkUrl("http://169.254.169.254:8080/")).toThrow(MediaError);
  });
});

describe("resolved addresses (runtimes with DNS)", () => {
  const zone: Record<string, string[]> = {
    "public.example.com": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
    "rebind.example.com": ["93.184.216.34", "127.0.0.1"],
    "mapped.example.com": ["::ffff:169.254.169.254"],
    "private.example.com": ["10.1.2.3"],
    "empty.example.com": [],
  };
  const resolve = async (h: string): Promise<string[]> => {
    const r = zone[h];
    if (!r) throw new Error("NXDOMAIN");
    return r;
  };
  const seen: (PinnedDestination | null)[] = [];
  // The fetch stands in for the network (no public internet here); it records what it was pinned to.
  const recordingFetch: FetchLike = async (_url, _init, pinned) => {
    seen.push(pinned);
    return new Response("ok");
  };
  const f = new SafeFetcher({}, { fetch: recordingFetch, resolve });

  it("pins a public host to its validated addresses", async () => {
    const { bytes } = await f.fetchBytes("http://public.example.com/a.png");
    expect(new TextDecoder().decode(bytes)).toBe("ok");
    expect(seen.at(-1)).toEqual({ hostname: "public.example.com", port: 80, addresses: zone["public.example.com"] });
  });

  for (const [host, reason] of [
    ["rebind.example.com", "blocked_address"],
    ["mapped.example.com", "blocked_address"],
    ["private.example.com", "blocked_address"],
    ["empty.example.com", "dns_failed"],
    ["nxdomain.example.com", "dns_failed"],
  ] as const) {
    it(`refuses ${host} (${reason}) before fetching`, async () => {
      const before = seen.length;
      await expect(f.open(`http://${host}/x`)).rejects.toMatchObject({ reason });
      expect(seen.length).toBe(before);
    });
  }
});

describe("data: URLs", () => {
  const png = Uint8Array.of(0x89, 0x50, 0x4e, 0x47, 1, 2, 3);
  const b64 = Buffer.from(png).toString("base64");

  it("decodes base64 strictly, as SGLang does", () => {
    const d = parseDataUrl(`data:image/png;base64,${b64}`, { maxBytes: 100 });
    expect(d).toMatchObject({ mimeType: "image/png", base64: true, sglangCompatible: true });
    expect([...d.bytes]).toEqual([...png]);
    for (const bad of [`data:image/png;base64,${b64.slice(0, -1)}`, `data:image/png;base64,${b64} `, "data:image/png;base64,iVBO%52w0KGgo=", "data:image/png;base64,ab-_"]) {
      expect(() => parseDataUrl(bad, { maxBytes: 100 }), bad).toThrow(MediaError);
    }
  });

  it("decodes forgiving base64 and percent-encoded bodies on request", () => {
    const d = parseDataUrl(`data:image/png;base64,${b64.replace(/=+$/, "").replace(/^(....)/, "$1 \n")}%3D%3D`, { maxBytes: 100, base64Mode: "forgiving" });
    expect([...d.bytes]).toEqual([...png]);
    expect(d.sglangCompatible).toBe(false);
    const t = parseDataUrl("data:,a%20b%F0%9F%98%80", { maxBytes: 100 });
    expect(new TextDecoder().decode(t.bytes)).toBe("a b😀");
    expect(t.mimeType).toBe("text/plain;charset=us-ascii");
    expect(t.sglangCompatible).toBe(false);
  });

  it("enforces the size cap before decoding", () => {
    const big = "data:application/octet-stream;base64," + "A".repeat(4 * 1000);
    expect(() => parseDataUrl(big, { maxBytes: 2999 })).toThrow(MediaTooLargeError);
    expect(parseDataUrl(big, { maxBytes: 3000 }).bytes.length).toBe(3000);
    expect(() => parseDataUrl("data:," + "x".repeat(5000), { maxBytes: 100 })).toThrow(MediaTooLargeError);
  });

  it("is served by the fetcher without any network, and can be turned off", async () => {
    const { bytes, response } = await fetcher.fetchBytes(`data:image/png;base64,${b64}`);
    expect([...bytes]).toEqual([...png]);
    expect(response.source).toBe("data");
    const off = new SafeFetcher({ allowDataUrls: false });
    await expect(off.open(`data:image/png;base64,${b64}`)).rejects.toMatchObject({ reason: "bad_scheme" });
  });
});
