/** JSON in and out of the decode service's HTTP requests, with a bounded request body. */
import type http from "node:http";
import { InvalidRequestError } from "../../src/api/errors.ts";

const MAX_JSON_BODY = 1 << 20;

export async function readJson(req: http.IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let n = 0;
  for await (const c of req as AsyncIterable<Buffer>) {
    n += c.length;
    if (n > MAX_JSON_BODY) throw new InvalidRequestError("JSON body too large.");
    chunks.push(c);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    throw new InvalidRequestError("Body is not valid JSON.");
  }
}

/** Answers `body` as JSON; a response already started (media bytes) is only ended. */
export function sendJson(res: http.ServerResponse, status: number, body: unknown): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  const text = JSON.stringify(body);
  res.setHeader("content-type", "application/json");
  res.setHeader("content-length", Buffer.byteLength(text));
  res.writeHead(status);
  res.end(text);
}

/** The request's media type, lower case, without parameters ("" when none). */
export function contentTypeOf(req: http.IncomingMessage): string {
  return (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
}
