/**
 * docs/architecture.md's map stays true: every folder under src/ is a room in its table, every room
 * in the table exists, and every import between rooms points to a lower layer (so dependencies run
 * one way: edge → stages → shared primitives). src/ imports nothing from the adapters or services.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../../..");
const SRC = join(ROOT, "src");

function roomLayers(): Map<string, number> {
  const doc = readFileSync(join(ROOT, "docs/architecture.md"), "utf8");
  const rows = [...doc.matchAll(/^\| (\d+) \| `src\/([a-z0-9-]+)\/` \|/gm)];
  return new Map(rows.map((m) => [m[2]!, Number(m[1])]));
}

function tsFiles(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...tsFiles(p));
    else if (/\.(ts|js)$/.test(name)) out.push(p);
  }
  return out;
}

const srcRooms = readdirSync(SRC).filter((n) => statSync(join(SRC, n)).isDirectory());
// generated/ appears only after `npm run build:assets`; the other rooms are committed.
const committedRooms = srcRooms.filter((n) => n !== "generated");

describe("docs/architecture.md map", () => {
  const layers = roomLayers();

  it("names every src/ folder, and only folders that exist", () => {
    expect(layers.size).toBeGreaterThan(10);
    for (const room of srcRooms) expect(layers.has(room), `src/${room}/ is missing from the map in docs/architecture.md`).toBe(true);
    for (const room of layers.keys()) if (room !== "generated") expect(committedRooms, `the map names src/${room}/, which does not exist`).toContain(room);
  });

  it("imports between rooms point to a lower layer; src/ imports no adapter or service", () => {
    const bad: string[] = [];
    for (const room of committedRooms) {
      for (const file of tsFiles(join(SRC, room))) {
        const text = readFileSync(file, "utf8");
        for (const m of text.matchAll(/(?:from|import)\s*\(?\s*["'](\.{1,2}\/[^"']+)["']/g)) {
          const target = relative(ROOT, resolve(dirname(file), m[1]!));
          const where = `${relative(ROOT, file)} → ${target}`;
          if (!target.startsWith("src/")) {
            bad.push(`${where}: src/ must not import ${target.split("/")[0]}/`);
            continue;
          }
          const to = target.split("/")[1]!;
          if (to === room) continue;
          const from = layers.get(room)!, toLayer = layers.get(to);
          if (toLayer === undefined || toLayer >= from) bad.push(`${where}: layer ${from} (${room}) may not import layer ${toLayer} (${to})`);
        }
      }
    }
    expect(bad).toEqual([]);
  });
});

/**
 * The edge and functions/ reach a pool's routing index through its front door only
 * (src/routing-index/front-door.ts): they import from src/routing-index nothing but the door and
 * the objects' names (pool-address.ts), write no client types of their own and cast no stub; the
 * Durable Object implements the door and answers nothing over RPC that the door does not declare.
 */
describe("the routing index's front door", () => {
  const DOOR = join(SRC, "routing-index/front-door.ts");
  const OBJECT = join(ROOT, "durable-objects/routing-index.ts");
  const EDGE_FILES = [...tsFiles(join(SRC, "edge")), ...tsFiles(join(ROOT, "functions"))];
  const doorText = readFileSync(DOOR, "utf8");
  const doorMethods = new Set([...doorText.matchAll(/^\s+([a-zA-Z]+)\(.*\): Promise</gm)].map((m) => m[1]!));

  it("is the edge's only way into the routing index", () => {
    const bad: string[] = [];
    for (const file of EDGE_FILES) {
      const text = readFileSync(file, "utf8");
      for (const m of text.matchAll(/(?:from|import)\s*\(?\s*["'](\.{1,2}\/[^"']+)["']/g)) {
        const target = relative(ROOT, resolve(dirname(file), m[1]!));
        const where = `${relative(ROOT, file)} → ${target}`;
        if (target.startsWith("src/routing-index/") && target !== "src/routing-index/front-door.ts" && target !== "src/routing-index/pool-address.ts")
          bad.push(`${where}: the edge asks the index through front-door.ts`);
        // functions/index.ts exports the object classes and names their bindings; nothing else imports them.
        if (target.startsWith("durable-objects/") && relative(ROOT, file) !== "functions/index.ts") bad.push(`${where}: only functions/index.ts wires the objects`);
      }
    }
    expect(doorMethods.size).toBeGreaterThan(15);
    expect(bad).toEqual([]);
  });

  it("has no hand-written twin: no edge type declares the door's methods, no stub is cast", () => {
    const bad: string[] = [];
    for (const file of EDGE_FILES) {
      const text = readFileSync(file, "utf8");
      const where = relative(ROOT, file);
      // A client type of its own declares several of the door's methods (one alone may be a namesake).
      for (const t of text.matchAll(/(?:interface|type) ([A-Za-z]+)[^{\n]*\{([\s\S]*?)\n\}/g)) {
        const declared = [...t[2]!.matchAll(/^\s+([a-zA-Z]+)\(.*\): Promise</gm)].map((m) => m[1]!).filter((name) => doorMethods.has(name));
        if (declared.length >= 2) bad.push(`${where}: ${t[1]} declares ${declared.join(", ")} (take the type from front-door.ts)`);
      }
      text.split("\n").forEach((line, i) => {
        if (/ as unknown as /.test(line) && /index|Index|stub|Stub|FrontDoor/.test(line)) bad.push(`${where}:${i + 1}: casts across the edge ↔ index boundary`);
      });
    }
    expect(bad).toEqual([]);
  });

  it("is what the Durable Object implements, and all it answers over RPC", () => {
    const text = readFileSync(OBJECT, "utf8");
    expect(text).toMatch(/class RoutingIndex extends DurableObject<[A-Za-z]+> implements PoolIndexFrontDoor \{/);
    const rpc = [...text.matchAll(/^ {2}async ([a-zA-Z]+)\(/gm)].map((m) => m[1]!);
    expect(rpc.length).toBeGreaterThan(15);
    expect(rpc.filter((name) => !doorMethods.has(name))).toEqual([]);
  });
});

/**
 * The block index is the routing index's inside: the edge, the Worker's adapters and the relay find
 * a pool's shards through pool-address.ts and the relay wire's placement rule (chain-shards.ts),
 * never in src/block-index/.
 */
describe("the block index", () => {
  it("is reached by no edge file, adapter or relay", () => {
    const files = ["src/edge", "functions", "durable-objects", "services/relay"].flatMap((d) => tsFiles(join(ROOT, d)));
    const bad: string[] = [];
    for (const file of files) {
      for (const m of readFileSync(file, "utf8").matchAll(/(?:from|import)\s*\(?\s*["'](\.{1,2}\/[^"']+)["']/g)) {
        const target = relative(ROOT, resolve(dirname(file), m[1]!));
        if (target.startsWith("src/block-index/")) bad.push(`${relative(ROOT, file)} → ${target}`);
      }
    }
    expect(files.length).toBeGreaterThan(30);
    expect(bad).toEqual([]);
  });
});
