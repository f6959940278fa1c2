/**
 * `npm start`: the edge API with a local simulated fleet — 2 SGLang simulators with their relays,
 * the regional decode service, a local media server with sample media, and the edge Worker served by
 * Miniflare (scripts/local-edge.ts) — all on 127.0.0.1. Needs nothing beyond `npm ci`: without a native ffmpeg the
 * sample media are made, and videos probed, by ffmpeg's wasm build (@ffmpeg/core).
 * Ctrl-C (or SIGTERM) stops everything; so does this process dying any other way (the fleet's
 * children are tied to it, see scripts/local-fleet.ts).
 */
import { existsSync, mkdirSync, renameSync } from "node:fs";
import { join } from "node:path";
import { ffmpegOnFiles, WasmFfmpeg } from "../services/decode/wasm-core.ts";
import { fleetRoleOf, startFleet, type Fleet, type FleetShape } from "./local-fleet.ts";
import { parseStartEnv } from "./start-env.ts";

const startEnv = parseStartEnv(process.env);
if (!startEnv.ok) {
  for (const e of startEnv.errors) console.error(`kvedge: ${e}`);
  process.exit(2);
}
const { PORT: port, KVEDGE_WORKERS: workers, KVEDGE_DP_SIZE: dpSize, KVEDGE_FLEET: shapeVar } = startEnv.env;
const verbose = startEnv.env.KVEDGE_VERBOSE === "1" || startEnv.env.KVEDGE_VERBOSE === "true";
const shape: FleetShape = shapeVar === "epd" ? "pd" : shapeVar;
const encoders = shapeVar === "epd" ? 1 : 0;

let fleet: Fleet | null = null;
let stopping = false;
const shutdown = async (code: number): Promise<void> => {
  if (stopping) return;
  stopping = true;
  console.log("\nkvedge: stopping ...");
  await fleet?.stop();
  process.exit(code);
};
// Registered before the start: a Ctrl-C half-way through stops what has started so far.
process.on("SIGINT", () => void shutdown(0));
process.on("SIGTERM", () => void shutdown(0));
process.on("SIGHUP", () => void shutdown(0));
// Started by npm (or another parent) that dies without passing a signal on: stop with it.
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) void shutdown(0);
}, 1000).unref();

/** Sample media for the examples, made once with ffmpeg's wasm build (never downloaded). */
async function sampleMedia(): Promise<string> {
  const dir = join(".wrangler", "samples");
  mkdirSync(dir, { recursive: true });
  const ff = new WasmFfmpeg();
  const make = async (name: string, args: string[]): Promise<void> => {
    const file = join(dir, name);
    if (existsSync(file)) return;
    await ffmpegOnFiles(ff, ["-loglevel", "error", ...args], `${file}.part${name.slice(name.lastIndexOf("."))}`);
    renameSync(`${file}.part${name.slice(name.lastIndexOf("."))}`, file);
  };
  await make("image.png", ["-f", "lavfi", "-i", "testsrc=size=640x480", "-frames:v", "1"]);
  // 5 s at 30 fps: SGLang samples 10 frames (fps 2) from it.
  await make("video.mp4", ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30", "-t", "5", "-pix_fmt", "yuv420p", "-c:v", "libx264", "-preset", "ultrafast"]);
  return dir;
}

const media = await sampleMedia();
console.log(`kvedge: starting ${workers} simulated SGLang workers, their relays, the decode service, a media server and the edge (Miniflare) on 127.0.0.1:${port} ...`);
try {
  fleet = await startFleet({
    workers,
    dpSize,
    shape,
    encoders,
    edgePort: port,
    persistTo: process.env.KVEDGE_STATE_DIR ?? ".wrangler/state",
    mediaDir: media,
    log: (l) => {
      if (verbose || l.startsWith("[fleet]") || /error|warn|down|refus/i.test(l)) console.log(l);
    },
    onEdgeLost: (reason) => {
      console.error(`kvedge: ${reason}; stopping.`);
      void shutdown(1);
    },
  });
} catch (err) {
  // startFleet has already stopped whatever it had started.
  console.error(`kvedge: failed to start: ${(err as Error).message}`);
  if (/address already in use|EADDRINUSE/i.test((err as Error).message)) console.error(`kvedge: is port ${port} taken? Set PORT=... to use another.`);
  process.exit(1);
}
if (stopping) await new Promise(() => {}); // a signal arrived during the start: shutdown() exits

const f = fleet;
const body = (content: unknown): string => JSON.stringify({ model: f.model, messages: [{ role: "user", content }], max_tokens: 32 });
const curl = (b: string): string => `  curl -s ${f.edgeUrl}/v1/chat/completions -H 'content-type: application/json' -D - \\\n    -d '${b}'`;
const decoder =
  f.decoder === "wasm" ? "ffmpeg's wasm build (@ffmpeg/core; no native ffprobe found)" : f.decoder === "native" ? "native ffprobe" : "none";
console.log(`
kvedge is up: ${f.edgeUrl}   (OpenAI base URL: ${f.edgeUrl}/v1)
  workers: ${f.workers.map((w, i) => `${w.id}=${w.url}${shape === "pd" ? ` (${fleetRoleOf(shape, i, f.workers.length)}${f.encoderUrls[w.id] ? `, language-only; encoder ${f.encoderUrls[w.id]!.join(", ")}` : ""})` : ""}`).join(", ")}
  media server: ${f.mediaUrl}   decode service: ${f.decodeUrl}
  video probing (decode service and simulated workers): ${decoder}
  admin token (this run): ${f.adminToken}
  dashboard: ${f.edgeUrl}/dashboard   (sign in with the admin token above)

Try (run each twice and watch x-kvedge-overlap-blocks and cached_tokens):
${curl(body("Hello! What is KV-cache-aware routing?"))}
${curl(body([{ type: "image_url", image_url: { url: `${f.mediaUrl}/image.png` } }, { type: "text", text: "What is in this image?" }]))}
${curl(body([{ type: "video_url", video_url: { url: `${f.mediaUrl}/video.mp4` } }, { type: "text", text: "What happens in this video?" }]))}
  curl -s ${f.edgeUrl}/metrics -H 'authorization: Bearer ${f.adminToken}'

Ctrl-C to stop.`);
