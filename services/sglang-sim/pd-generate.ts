/**
 * A simulated PD worker's `/generate` front: before the usual handling (generate.ts), a prefill
 * registers the request's bootstrap room and ends it after its first token; a decode waits for the
 * room's KV from its prefill peer (disaggregation.ts), then decodes without a prefill of its own.
 */
import type { ServerResponse } from "node:http";
import type { EngineConfig } from "./engine.ts";
import { BootstrapServer, bootstrapOf, PdRequestError, rankField, receiveRoomKv } from "./disaggregation.ts";
import type { SimOptions } from "./options.ts";

export interface PdSide {
  mode: "prefill" | "decode";
  /** The prefill's bootstrap port (/server_info disaggregation_bootstrap_port); null on a decode. */
  bootstrapPort: number | null;
  /** Hooks every scheduler of the worker gets. */
  engineHooks: Pick<EngineConfig, "onPrefilled" | "transferredCached">;
  /** Prepares the parsed body in place; false when it has answered the request itself (an error). */
  beforeGenerate(body: unknown, res: ServerResponse): Promise<boolean>;
  close(): Promise<void>;
  kill(): void;
}

/** Decode requests whose KV has arrived but which are not submitted yet, at most (oldest dropped). */
const MAX_PENDING_TRANSFERS = 10_000;

export async function startPdSide(opts: SimOptions): Promise<PdSide | null> {
  if (opts.disaggregationMode === "null") return null;
  if (opts.disaggregationMode === "prefill") {
    const bootstrap = await BootstrapServer.start(opts.host, opts.disaggregationBootstrapPort, opts.dpSize);
    return {
      mode: "prefill",
      bootstrapPort: bootstrap.port,
      engineHooks: { onPrefilled: (rid, cached, prompt) => bootstrap.prefilled(rid, cached, prompt) },
      async beforeGenerate(body, res) {
        return answerErrors(res, () => {
          const b = singleRequest(body);
          const { room } = bootstrapOf(b, "prefill");
          bootstrap.expect(ridOf(b, room), room, prefillRank(b, room, opts.dpSize));
          // A prefill server ends the request after its first token; the decode continues it.
          const sp = isRecord(b["sampling_params"]) ? { ...b["sampling_params"] } : {};
          delete sp["min_new_tokens"];
          b["sampling_params"] = { ...sp, max_new_tokens: 1 };
        });
      },
      close: () => bootstrap.close(),
      kill: () => bootstrap.kill(),
    };
  }
  const transfers = new Map<string, number>();
  return {
    mode: "decode",
    bootstrapPort: null,
    engineHooks: {
      transferredCached: (rid) => {
        const cached = transfers.get(rid);
        transfers.delete(rid);
        return cached ?? null;
      },
    },
    async beforeGenerate(body, res) {
      const gone = new AbortController();
      res.on("close", () => gone.abort());
      return answerErrors(res, async () => {
        const b = singleRequest(body);
        const peer = bootstrapOf(b, "decode");
        const rid = ridOf(b, peer.room);
        const kv = await receiveRoomKv({ ...peer, prefillDpRank: rankField(b, "disagg_prefill_dp_rank") }, opts.disaggregationWaitingTimeoutMs, gone.signal);
        transfers.set(rid, kv.cachedTokens);
        if (transfers.size > MAX_PENDING_TRANSFERS) transfers.delete(transfers.keys().next().value!);
      });
    },
    close: async () => undefined,
    kill: () => undefined,
  };
}

async function answerErrors(res: ServerResponse, prepare: () => void | Promise<void>): Promise<boolean> {
  try {
    await prepare();
    return true;
  } catch (err) {
    if (!(err instanceof PdRequestError)) {
      if (res.destroyed) return false; // the client went away while the decode waited
      throw err;
    }
    const body =
      err.status === 400
        ? { error: { message: err.message } }
        : { object: "error", message: err.message, type: "InternalServerError", param: null, code: 500 };
    const data = JSON.stringify(body);
    if (!res.headersSent) res.writeHead(err.status, { "content-type": "application/json", "content-length": Buffer.byteLength(data) });
    res.end(data);
    return false;
  }
}

function singleRequest(body: unknown): Record<string, unknown> {
  if (!isRecord(body)) throw new PdRequestError("the request body is not a JSON object", 400);
  const ids = body["input_ids"];
  if (Array.isArray(body["text"]) || (Array.isArray(ids) && Array.isArray(ids[0])) || Array.isArray(body["rid"]))
    throw new PdRequestError("batched requests are not simulated on a PD worker", 400);
  return body;
}

/**
 * The DP rank a prefill runs the request on: `routed_dp_rank`, else `room % dp_size`
 * (follow_bootstrap_room, set in the body for the scheduler). A rank that is not the room's fails the
 * request unless the body names the prefill rank (`disagg_prefill_dp_rank`) for the decode.
 */
function prefillRank(b: Record<string, unknown>, room: bigint, dpSize: number): number {
  if (dpSize <= 1) return 0;
  const implied = Number(room % BigInt(dpSize));
  const routed = rankField(b, "routed_dp_rank");
  if (routed === null) b["routed_dp_rank"] = implied;
  const rank = routed ?? implied;
  if (rank !== implied && rankField(b, "disagg_prefill_dp_rank") === null)
    throw new PdRequestError(
      `follow_bootstrap_room conflict: dispatched to dp_rank ${rank} but bootstrap_room ${room} implies dp_rank ${implied}. Set SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK=1 to allow mixed routing.`,
      500,
    );
  return rank;
}

/** The request's rid, set when the caller gave none (both sides then use one derived from the room). */
function ridOf(b: Record<string, unknown>, room: bigint): string {
  if (typeof b["rid"] === "string" && b["rid"].length > 0) return b["rid"];
  const rid = `pd-${room}`;
  b["rid"] = rid;
  return rid;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
