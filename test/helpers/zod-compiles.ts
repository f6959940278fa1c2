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
