/**
 * `node scripts/wasm-ffmpeg.ts [ffmpeg args...] OUT`: one ffmpeg command run by the wasm build
 * (@ffmpeg/core, an npm dependency) on host files, for machines without a native ffmpeg. `-i`
 * inputs are read from disk (lavfi sources such as `-f lavfi -i testsrc=...` work as usual) and
 * the output is written to OUT. Sample media for `npm start` and test fixtures are made with it.
 */
import { ffmpegOnFiles, WasmFfmpeg } from "../services/decode/wasm-core.ts";

const args = process.argv.slice(2);
const out = args.pop();
if (!out || args.length === 0) {
  process.stderr.write("usage: node scripts/wasm-ffmpeg.ts [ffmpeg args...] OUT\n");
  process.exit(2);
}
try {
  await ffmpegOnFiles(new WasmFfmpeg(), args, out);
} catch (e) {
  process.stderr.write(`wasm-ffmpeg: ${(e as Error).message}\n`);
  process.exit(1);
}
