/**
 * docs/architecture.md's map stays true: every folder under src/ is a room in its table, every room
 * in the table exists, and every import between rooms points to a lower layer (so dependencies run
 * one way: edge → stages → shared primitives). src/ imports nothing from the adapters or services.
 */
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "../..");
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
