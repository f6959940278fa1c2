/**
 * The fleet's reaper: a tiny process the launcher starts first, in its own process group, with a
 * pipe on stdin. The launcher writes "+PGID" for every child process group it starts and "-PGID"
 * when one has exited. When the pipe closes, whatever the reason (stop(), a crash, SIGKILL of the
 * launcher: the kernel closes the launcher's end), the reaper sends SIGTERM to every group still
 * listed, SIGKILL a moment later, and exits. Children run in their own groups (so a kill also
 * reaches wrangler's workerd); this is what ties those groups to the launcher's life.
 * Plain JavaScript with no imports beyond node:, so it is up in milliseconds.
 */
const groups = new Set();
const GRACE_MS = 1500;

for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(sig, () => {}); // outlive the launcher's signals; only EOF ends us

const signal = (sig) => {
  for (const g of groups) {
    try {
      process.kill(-g, sig);
    } catch {
      groups.delete(g); // the group is gone
    }
  }
};

let rest = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  const lines = (rest + chunk).split("\n");
  rest = lines.pop() ?? "";
  for (const l of lines) {
    const n = Number(l.slice(1));
    if (!Number.isInteger(n) || n <= 1) continue;
    if (l[0] === "+") groups.add(n);
    else if (l[0] === "-") groups.delete(n);
  }
});
const alive = () => {
  signal(0); // drops the groups that are gone
  return groups.size > 0;
};
let reaping = false;
const reap = () => {
  if (reaping) return;
  reaping = true;
  signal("SIGTERM");
  const deadline = Date.now() + GRACE_MS;
  const tick = setInterval(() => {
    if (alive() && Date.now() < deadline) return;
    signal("SIGKILL");
    clearInterval(tick);
    process.exit(0);
  }, 100);
};
process.stdin.on("end", reap);
process.stdin.on("error", reap);
