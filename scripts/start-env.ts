/**
 * The environment `npm start` reads (scripts/start.ts), checked by zod: a value that is not a
 * whole number in range stops the start with a message naming the variable (Number("abc") was NaN).
 */
import { z } from "zod";

/** A decimal whole number in [min, max]; unset or empty: `fallback`. */
function wholeVar(name: string, min: number, max: number, fallback: number) {
  return z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v === "") return fallback;
      const n = /^\d{1,6}$/.test(v.trim()) ? Number(v.trim()) : NaN;
      if (n >= min && n <= max) return n;
      ctx.addIssue({ code: "custom", message: `${name} must be a whole number ${min}…${max}, not ${JSON.stringify(v.slice(0, 32))}` });
      return z.NEVER;
    });
}

export const StartEnvSchema = z.object({
  PORT: wholeVar("PORT", 1, 65535, 8787),
  KVEDGE_WORKERS: wholeVar("KVEDGE_WORKERS", 1, 64, 2),
  /** Attention-DP ranks per simulated worker (each rank a routing target); 1 = single-rank workers. */
  KVEDGE_DP_SIZE: wholeVar("KVEDGE_DP_SIZE", 1, 16, 1),
  /**
   * pd: a prefill/decode pool (the first half of the workers prefill, the rest decode); epd: the
   * same with one encoder-only server per prefill worker, which runs --language-only.
   */
  KVEDGE_FLEET: z.enum(["unified", "pd", "epd"], { error: "KVEDGE_FLEET must be one of unified, pd, epd" }).default("unified"),
  // "true"/"false" were accepted before this check existed; kept so an old setting still starts.
  KVEDGE_VERBOSE: z.enum(["0", "1", "false", "true"], { error: 'KVEDGE_VERBOSE must be "0", "1", "false" or "true"' }).optional(),
});

export type StartEnv = z.output<typeof StartEnvSchema>;

/** The start's settings, or the messages naming each bad variable. */
export function parseStartEnv(env: Record<string, string | undefined>): { ok: true; env: StartEnv } | { ok: false; errors: string[] } {
  const r = StartEnvSchema.safeParse(env);
  return r.success ? { ok: true, env: r.data } : { ok: false, errors: r.error.issues.map((i) => i.message) };
}
