/**
 * The fleet's reaper: a tiny process the launcher starts first, in its own process group, with a
 * pipe on stdin. The launcher writes "+PGID" for every child process group it starts. When the pipe
 * closes, whatever the reason (stop(), a failed start, a crash, SIGKILL of the launcher: the kernel
 * closes the launcher's end), or when the launcher stops being our parent, the reaper sends SIGTERM
 * to every listed group that still exists, SIGKILL 1.5 s later to what is left, and exits. A group
 * outlives its leader (wrangler's workerd stays in wrangler's group), so groups are what it kills.
 * Children run in their own groups so that a kill reaches those grandchildren; this is what ties
 * the groups to the launcher's life. Plain JavaScript with no imports, so it is up in milliseconds.
 */
const groups = new Set();
const GRACE_MS = 1500;

for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(sig, () => {}); // outlive the launcher's signals: only losing the launcher ends us

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
// Second trigger: the launcher is our parent; once it is gone we are re-parented.
const launcher = process.ppid;
setInterval(() => {
  if (process.ppid !== launcher) reap();
}, 500);
