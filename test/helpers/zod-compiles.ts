import { afterAll, beforeAll, vi } from "vitest";

/** How many functions are compiled from text (`new Function`, how zod compiles a parser) while `run` runs. */
export function compilesDuring(run: () => void): number {
  const real = globalThis.Function;
  let compiles = 0;
  globalThis.Function = new Proxy(real, {
    construct(target, args) {
      compiles++;
      return Reflect.construct(target, args) as object;
    },
  });
  try {
    run();
  } finally {
    globalThis.Function = real;
  }
  return compiles;
}

/** zod's two parser modes: compiled (Node's default) and jitless, as in workerd, which forbids eval. */
export const ZOD_MODES = [
  ["compiled", false],
  ["jitless (as in workerd, which forbids eval)", true],
] as const;

/**
 * Registers, in the enclosing describe, an import of `load`'s modules afresh under zod's `jitless`
 * setting, restored afterwards. zod decides when a schema is built whether it compiles its parser
 * (zod 4.6.7, v4/core/schemas.js $ZodObjectJIT: `jit = !globalConfig.jitless`), and schemas are built
 * at import. Returns the modules once its beforeAll has run.
 */
export function modulesUnderZodMode<M>(jitless: boolean, load: () => Promise<M>): () => M {
  let modules: M | undefined;
  let before: boolean | undefined;
  beforeAll(async () => {
    vi.resetModules();
    const fresh = await import("zod");
    before = fresh.z.config().jitless;
    fresh.z.config({ jitless });
    modules = await load();
  });
  afterAll(async () => {
    (await import("zod")).z.config({ jitless: before });
  });
  return () => modules!;
}
