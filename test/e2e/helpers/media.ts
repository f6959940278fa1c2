/** Test media generated with ffmpeg's wasm build (never downloaded) and small helpers for media e2e tests. */
import { copyFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ffmpegToFileSync } from "../../helpers/wasm-media.ts";

export function makeMediaDir(): string {
  return mkdtempSync(join(tmpdir(), "kvedge-media-"));
}

function ffmpeg(args: string[]): void {
  ffmpegToFileSync(["-loglevel", "error", ...args.slice(0, -1)], args.at(-1)!);
}

/** A clip of `seconds` at `fps` (H.264 MP4). 5 s at 30 fps → SGLang samples 10 frames. */
export function makeVideo(dir: string, name: string, opts: { seconds?: number; frames?: number; fps?: number; size?: string; source?: string } = {}): string {
  const fps = opts.fps ?? 30;
  const src = `${opts.source ?? "testsrc"}=size=${opts.size ?? "320x240"}:rate=${fps}`;
  const len = opts.frames !== undefined ? ["-frames:v", String(opts.frames)] : ["-t", String(opts.seconds ?? 5)];
  ffmpeg(["-f", "lavfi", "-i", src, ...len, "-pix_fmt", "yuv420p", "-c:v", "libx264", "-preset", "ultrafast", join(dir, name)]);
  return name;
}

export function makeImage(dir: string, name: string, opts: { size?: string; source?: string } = {}): string {
  ffmpeg(["-f", "lavfi", "-i", `${opts.source ?? "testsrc"}=size=${opts.size ?? "448x336"}`, "-frames:v", "1", join(dir, name)]);
  return name;
}

export function copyMedia(dir: string, from: string, to: string): string {
  copyFileSync(join(dir, from), join(dir, to));
  return to;
}

export interface ChatResult {
  status: number;
  worker: string | null;
  routing: string | null;
  fallbackReason: string | null;
  overlapBlocks: number;
  totalBlocks: number;
  promptTokens: number;
  cachedTokens: number;
  requestId: string | null;
  body: unknown;
}

export async function chat(edgeUrl: string, body: Record<string, unknown>): Promise<ChatResult> {
  const r = await fetch(`${edgeUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ max_tokens: 4, ...body }) });
  const json = (await r.json()) as { usage?: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } } };
  return {
    status: r.status,
    worker: r.headers.get("x-kvedge-worker"),
    routing: r.headers.get("x-kvedge-routing"),
    fallbackReason: r.headers.get("x-kvedge-fallback-reason"),
    overlapBlocks: Number(r.headers.get("x-kvedge-overlap-blocks") ?? "0"),
    totalBlocks: Number(r.headers.get("x-kvedge-total-blocks") ?? "0"),
    promptTokens: json.usage?.prompt_tokens ?? 0,
    cachedTokens: json.usage?.prompt_tokens_details?.cached_tokens ?? 0,
    requestId: r.headers.get("x-request-id"),
    body: json,
  };
}

/** What the worker received for a request (the simulator's debug log), by the edge's request id. */
export async function sentToWorker(workerUrl: string, rid: string): Promise<{ mmHashes: unknown; images: number; videos: number } | undefined> {
  const r = (await (await fetch(`${workerUrl}/debug/requests`)).json()) as { requests: { rid: string | null; mmHashes: unknown; images: number; videos: number }[] };
  return r.requests.find((x) => x.rid === rid);
}

export const userWith = (parts: unknown[]) => ({ messages: [{ role: "user", content: parts }] });
export const text = (t: string) => ({ type: "text", text: t });
export const video = (url: string) => ({ type: "video_url", video_url: { url } });
export const image = (url: string) => ({ type: "image_url", image_url: { url } });

/** Sends the same request three times. */
export async function repeat3(edgeUrl: string, body: Record<string, unknown>): Promise<ChatResult[]> {
  const out: ChatResult[] = [];
  for (let i = 0; i < 3; i++) out.push(await chat(edgeUrl, body));
  return out;
}

/**
 * The bar for repeated media: every copy routed exactly to one worker, every repeat with at
 * least `minCached` cached tokens, and mean router hit rate (overlap / total blocks) ≥ 0.95.
 */
export function expectExactRepeats(rs: ChatResult[], minCached: number, expect: (v: unknown, msg?: string) => any): void {
  for (const r of rs) {
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.routing, r.fallbackReason ?? "").toBe("exact");
    expect(r.worker).toBe(rs[0]!.worker);
  }
  const repeats = rs.slice(1);
  for (const r of repeats) expect(r.cachedTokens).toBeGreaterThanOrEqual(minCached);
  const mean = repeats.reduce((a, r) => a + r.overlapBlocks / r.totalBlocks, 0) / repeats.length;
  expect(mean).toBeGreaterThanOrEqual(0.95);
}
