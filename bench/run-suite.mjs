// Runs one suite in its own process (fresh heap and JIT state; --expose-gc for memory figures) and
// reports progress and the result to the parent (scripts/bench.mjs) over IPC.
const [name, mode] = process.argv.slice(2);
const send = (m) => (process.send ? process.send(m) : process.stderr.write(JSON.stringify(m) + "\n"));
try {
  const suite = (await import(`./suites/${name}.mjs`)).default;
  const ctx = {
    quick: mode === "quick",
    tiny: mode === "tiny",
    progress: (fraction, label) => send({ type: "progress", fraction, label }),
  };
  if (ctx.tiny) ctx.quick = true;
  const t0 = performance.now();
  const result = await suite.run(ctx);
  result.seconds = (performance.now() - t0) / 1000;
  send({ type: "result", result: JSON.parse(JSON.stringify(result, (_k, v) => (typeof v === "bigint" ? v.toString() : v))) });
} catch (e) {
  send({ type: "error", error: e instanceof Error ? (e.stack ?? e.message) : String(e) });
  process.exitCode = 1;
}
// Some suites leave handles (workerd, sockets) closing in the background: do not wait on them.
setTimeout(() => process.exit(process.exitCode ?? 0), 200).unref();
