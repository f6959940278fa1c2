/**
 * The router's local block hash: xxh3-64 over the little-endian u32 token ids of one full block,
 * seeded with 1337 (Dynamo's XXH3_SEED). Only complete blocks are hashed; a partial tail is ignored.
 * Position independence is intended: prefix structure comes from the radix index, not the hash.
 *
 * Cache namespaces (SGLang's `cache_salt`; docs/relay.md §Tenant isolation): a namespaced block
 * hashes its namespace tag (8 bytes, `namespaceTag`) followed by the tokens, so a salted block and
 * an unsalted (or differently salted) block with the same tokens never share a local hash; unsalted
 * blocks hash exactly as before. The edge tags a request's blocks with the salt it sends; the relay
 * tags a stored block with the salt SGLang reports in BlockStoredWithMetadata.
 */
import { xxh3_64 } from "../util/hash.ts";

export const LOCAL_HASH_SEED = 1337n;

/** 8 bytes identifying a cache namespace inside local hashes; null = no namespace. */
export type NamespaceTag = Uint8Array | null;

const nsEncoder = new TextEncoder();

/** The tag of cache namespace `namespace` (null/absent: none). Requires initHashing(). */
export function namespaceTag(namespace: string | null | undefined): NamespaceTag {
  if (namespace === null || namespace === undefined) return null;
  const h = xxh3_64(nsEncoder.encode("kvedge-cache-namespace-v1\0" + namespace), LOCAL_HASH_SEED);
  const tag = new Uint8Array(8);
  new DataView(tag.buffer).setBigUint64(0, h, true);
  return tag;
}

/** Hashes every full block of `tokens`. Requires initHashing(). */
export function localBlockHashes(tokens: ArrayLike<number>, blockSize: number, ns: NamespaceTag = null): bigint[] {
  return localBlockHashesOfParts([tokens], blockSize, ns);
}

let blockBuf = new Uint8Array(64);

/**
 * localBlockHashes of the parts' concatenation, without building it (the prompt-prefix cache hashes
 * a reused tail, the middle and the new text as one run). Requires initHashing().
 */
export function localBlockHashesOfParts(parts: readonly ArrayLike<number>[], blockSize: number, ns: NamespaceTag = null): bigint[] {
  if (!Number.isInteger(blockSize) || blockSize <= 0) throw new RangeError(`bad block size ${blockSize}`);
  const pre = ns === null ? 0 : 8;
  if (blockBuf.length < pre + blockSize * 4) blockBuf = new Uint8Array(pre + blockSize * 4);
  const buf = blockBuf.subarray(0, pre + blockSize * 4);
  if (ns !== null) buf.set(ns, 0);
  const view = new DataView(buf.buffer, pre, blockSize * 4);
  const out: bigint[] = [];
  let fill = 0;
  for (const part of parts) {
    for (let i = 0; i < part.length; i++) {
      view.setUint32(fill * 4, part[i]! >>> 0, true);
      if (++fill === blockSize) {
        out.push(xxh3_64(buf, LOCAL_HASH_SEED));
        fill = 0;
      }
    }
  }
  return out;
}

/** Local hash of exactly one block's tokens (relays recompute these from event token ids). */
export function localBlockHash(blockTokens: ArrayLike<number>, ns: NamespaceTag = null): bigint {
  const pre = ns === null ? 0 : 8;
  const buf = new Uint8Array(pre + blockTokens.length * 4);
  if (ns !== null) buf.set(ns, 0);
  const view = new DataView(buf.buffer, pre);
  for (let i = 0; i < blockTokens.length; i++) view.setUint32(i * 4, blockTokens[i]! >>> 0, true);
  return xxh3_64(buf, LOCAL_HASH_SEED);
}
