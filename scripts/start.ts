/**
 * `npm start`: the edge API with a local simulated fleet — 2 SGLang simulators with their relays,
 * the regional decode service, a local media server with sample media, and the edge under
 * `wrangler dev` — all on 127.0.0.1. Ctrl-C stops everything.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { startFleet } from "./local-fleet.ts";

const port = Number(process.env.PORT ?? 8787);
const workers = Number(process.env.KVEDGE_WORKERS ?? 2);
const verbose = process.env.KVEDGE_VERBOSE === "1";

/** Sample media for the media examples, made with ffmpeg when it is installed (never downloaded). */
function sampleMedia(): string | null {
  const dir = join(".wrangler", "samples");
  try {
    mkdirSync(dir, { recursive: true });
    const ff = (args: string[]) => execFileSync("ffmpeg", ["-hide_banner", "-loglevel", "error", "-y", ...args], { stdio: "ignore" });
    if (!existsSync(join(dir, "image.png"))) ff(["-f", "lavfi", "-i", "testsrc=size=640x480", "-frames:v", "1", join(dir, "image.png")]);
    if (!existsSync(join(dir, "video.mp4")))
      ff(["-f", "lavfi", "-i", "testsrc2=size=480x320:rate=30", "-t", "5", "-pix_fmt", "yuv420p", "-c:v", "libx264", join(dir, "video.mp4")]);
    return dir;
  } catch {
    return null;
  }
}

const media = sampleMedia();
console.log(`kvedge: starting ${workers} simulated SGLang workers, their relays${media ? ", the decode service, a media server" : ""} and the edge (wrangler dev) on 127.0.0.1:${port} ...`);
const fleet = await startFleet({
  workers,
  edgePort: port,
  persistTo: ".wrangler/state",
  ...(media ? { mediaDir: media } : {}),
  log: (l) => {
    if (verbose || /error|warn|down|refus/i.test(l)) console.log(l);
  },
});
const example = JSON.stringify({ model: fleet.model, messages: [{ role: "user", content: "Hello! What is KV-cache-aware routing?" }], max_tokens: 32 });
const mediaExample = fleet.mediaUrl
  ? JSON.stringify({
      model: fleet.model,
      messages: [{ role: "user", content: [{ type: "video_url", video_url: { url: `${fleet.mediaUrl}/video.mp4` } }, { type: "text", text: "What happens in this video?" }] }],
      max_tokens: 32,
    })
  : null;
console.log(`
kvedge is up: ${fleet.edgeUrl}   (OpenAI base URL: ${fleet.edgeUrl}/v1)
  workers: ${fleet.workers.map((w) => `${w.id}=${w.url}`).join(", ")}
  admin token (this run): ${fleet.adminToken}
  dashboard: ${fleet.edgeUrl}/dashboard   (sign in with the admin token above)

Try (run twice and watch x-kvedge-overlap-blocks and cached_tokens):
  curl -s ${fleet.edgeUrl}/v1/chat/completions -H 'content-type: application/json' -D - \\
    -d '${example}'
${
  mediaExample
    ? `  curl -s ${fleet.edgeUrl}/v1/chat/completions -H 'content-type: application/json' -D - \\
    -d '${mediaExample}'
`
    : "  (install ffmpeg for the media examples)\n"
}  curl -s ${fleet.edgeUrl}/metrics -H 'authorization: Bearer ${fleet.adminToken}'

Ctrl-C to stop.`);
const shutdown = async () => {
  console.log("\nkvedge: stopping ...");
  await fleet.stop();
  process.exit(0);
};
process.on("SIGINT", () => void shutdown());
process.on("SIGTERM", () => void shutdown());
