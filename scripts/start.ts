/**
 * `npm start`: the edge API with a local simulated fleet (2 SGLang simulators + relays +
 * wrangler dev) on 127.0.0.1. Ctrl-C stops everything.
 */
import { startFleet } from "./local-fleet.ts";

const port = Number(process.env.PORT ?? 8787);
const workers = Number(process.env.KVEDGE_WORKERS ?? 2);
const verbose = process.env.KVEDGE_VERBOSE === "1";
console.log(`kvedge: starting ${workers} simulated SGLang workers, their relays and the edge (wrangler dev) on 127.0.0.1:${port} ...`);
const fleet = await startFleet({
  workers,
  edgePort: port,
  persistTo: ".wrangler/state",
  log: (l) => {
    if (verbose || /error|warn|down|refus/i.test(l)) console.log(l);
  },
});
const example = JSON.stringify({ model: fleet.model, messages: [{ role: "user", content: "Hello! What is KV-cache-aware routing?" }], max_tokens: 32 });
console.log(`
kvedge is up: ${fleet.edgeUrl}
  workers: ${fleet.workers.map((w) => `${w.id}=${w.url}`).join(", ")}
  admin token (this run): ${fleet.adminToken}

Try:
  curl -s ${fleet.edgeUrl}/v1/chat/completions -H 'content-type: application/json' \\
    -d '${example}' -D - 
  curl -s ${fleet.edgeUrl}/admin/workers -H 'authorization: Bearer ${fleet.adminToken}'

Ctrl-C to stop.`);
const shutdown = async () => {
  console.log("\nkvedge: stopping ...");
  await fleet.stop();
  process.exit(0);
};
process.on("SIGINT", () => void shutdown());
process.on("SIGTERM", () => void shutdown());
