/**
 * A media origin for tests: serves what `files` holds at request time (path → bytes, or bytes with
 * their content type and optionally their Cache-Control), `no-store` unless a file names its own, 404 for anything else, and
 * counts what it served (the media store downloads a URL on every store call it gets).
 */
import http from "node:http";
import type { AddressInfo } from "node:net";

export type OriginFile = Uint8Array | { bytes: Uint8Array; type: string; cacheControl?: string };

export interface MediaOrigin {
  /** `http://host:port` */
  url: string;
  /** `host:port`, as media allowlists take it. */
  host: string;
  /** Files served so far. */
  hits(): number;
  close(): Promise<void>;
}

export async function startMediaOrigin(files: ReadonlyMap<string, OriginFile>, contentType = "image/png"): Promise<MediaOrigin> {
  let hits = 0;
  const server = http.createServer((req, res) => {
    const f = files.get(req.url ?? "");
    if (!f) return void res.writeHead(404).end();
    const [bytes, type, cacheControl] = f instanceof Uint8Array ? [f, contentType, "no-store"] : [f.bytes, f.type, f.cacheControl ?? "no-store"];
    hits++;
    res.writeHead(200, { "content-type": type, "content-length": bytes.length, "cache-control": cacheControl }).end(bytes);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: `http://${host}`,
    host,
    hits: () => hits,
    close: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}
