/**
 * Tenant and adapter isolation of the workers' KV caches (docs/relay.md §Tenant isolation).
 *
 * SGLang's `/generate` takes `cache_salt` (GenerateReqInput.cache_salt, managers/io_struct.py: "Cache
 * namespace used to isolate otherwise-identical prefixes"): its radix tree keeps requests of
 * different salts in disjoint subtrees, and salted blocks are published as
 * BlockStoredWithMetadata{cache_salt} with a salt-seeded hash chain (disaggregation/kv_events.py,
 * mem_cache/utils.py compute_node_event_hash_values). The edge sends one salt per namespace:
 *   tenant  = who is calling, when KVEDGE_KV_SHARING is "per_tenant" (default): the request's API key;
 *             an admin caller, all in one namespace of their own; an anonymous public caller
 *             (KVEDGE_ACCESS=public), by client network (/64 for IPv6, /32 for IPv4). Nobody outside
 *             a namespace can reuse or detect its cached prefixes, so `cached_tokens` and time to
 *             first token only ever tell a caller about their own namespace;
 *   adapter = the LoRA adapter the request names (`model: "<pool>:<adapter>"`): SGLang's events do
 *             not say which adapter a block belongs to (lora_id is always None), so an adapter's
 *             blocks must come back salted to never be predicted for another adapter or the base.
 * The salt is a keyed hash, HMAC-SHA256(RELAY_SECRET, JSON ["kvedge-cache-salt-v1", tenant, adapter])
 * in base64url (43 characters), tenant being the API key, ["admin"] or ["network", "<net>"] (a list
 * never equals a key): workers and relays see it, never the key or the address, and cannot invert it.
 * The router maps the request's local hashes into the salt's namespace (block-hash.ts); the relay
 * does the same with the salt each stored block reports, so the two meet only within a namespace.
 * Media item hashes move into the namespace too (namespacedItemHash): they are the `mm_hashes` the
 * worker keys its embedding cache by, so "was this image sent recently" stays within a namespace.
 */
import type { EdgeConfig } from "../config/config.ts";
import { namespacedLocalHash, namespacedLocalHashes, namespacedLocalHashWords, namespaceTag, type LocalHashes, type NamespaceTag } from "../blocks/block-hash.ts";
import { bytesToBase64url } from "../util/base64url.ts";
import { hmacSha256 } from "../util/hmac.ts";
import { SecretMemo } from "../util/secret-memo.ts";

/** Salts computed in this isolate (bounded: client networks are many; cleared when full). */
const salts = new SecretMemo(4096, async (secret, message) => bytesToBase64url(await hmacSha256(secret, message)));

/**
 * Whose cache a request uses: an API key's tenant, the admin callers, the anonymous callers of one
 * client network (rate-limit.ts clientNetwork), or null, the pool's common namespace (requests no
 * caller of the edge makes: a worker called directly; every request under KVEDGE_KV_SHARING=shared).
 */
export type CacheTenant = { apiKey: string } | { admin: true } | { network: string } | null;

export interface CacheNamespaceInput {
  tenant: CacheTenant;
  /** The LoRA adapter the request names (null: the base model). */
  adapter: string | null;
}

/** The cache_salt to send for this request, or null when it shares the pool's common namespace. */
export function cacheSaltFor(config: Pick<EdgeConfig, "kvSharing" | "relaySecret">, input: CacheNamespaceInput): Promise<string | null> {
  const tenant = config.kvSharing === "per_tenant" ? tenantPart(input.tenant) : null;
  if (tenant === null && input.adapter === null) return Promise.resolve(null);
  // Without the pool secret no worker can register, so there is nothing to isolate from.
  const secret = config.relaySecret;
  if (!secret) return Promise.resolve(null);
  return salts.get(secret, JSON.stringify(["kvedge-cache-salt-v1", tenant, input.adapter]));
}

/**
 * Whose entries a request may find in the edge's own content-keyed caches (the turn chain, the
 * prompt-prefix cache, the tokenizer's segment cache: src/prompt/): "" for the common partition
 * (KVEDGE_KV_SHARING=shared, or no RELAY_SECRET: then no worker can register), else the tenant's
 * base-model salt, opaque like the salt itself (an HMAC; never the key or the address). Those caches
 * compare it on every hit, so a tenant's warm entries, and the time they save, are its own: a
 * latency probe cannot tell whether another tenant sent a prompt, as `cached_tokens` cannot.
 */
export async function edgeCachePartition(config: Pick<EdgeConfig, "kvSharing" | "relaySecret">, tenant: CacheTenant): Promise<string> {
  if (config.kvSharing !== "per_tenant" || tenant === null) return "";
  return (await cacheSaltFor(config, { tenant, adapter: null })) ?? "";
}

/** The tenant's part of the salt message: API-key tenants keep the key itself (their salts predate the others). */
function tenantPart(t: CacheTenant): string | string[] | null {
  if (t === null) return null;
  if ("apiKey" in t) return t.apiKey;
  if ("admin" in t) return ["admin"];
  return ["network", t.network];
}

/** A request's cache namespace: the salt the worker is told and its tag for hashes (null: the common one). */
export interface RoutingNamespace {
  /** The cache_salt for `/generate` (null: the pool's common namespace). */
  cacheSalt: string | null;
  tag: NamespaceTag;
}

/** Tags of the salts in `salts` (as many, cleared with them when full): a tag is a hash of its salt, made once. Callers only read a tag. */
const tags = new Map<string, Uint8Array>();

function tagOf(cacheSalt: string): Uint8Array {
  let tag = tags.get(cacheSalt);
  if (tag === undefined) {
    if (tags.size >= salts.maxEntries) tags.clear();
    tag = namespaceTag(cacheSalt)!;
    tags.set(cacheSalt, tag);
  }
  return tag;
}

/** The namespace a request routes in: the one rule both routing and `explain` follow. Requires initHashing(). */
export async function routingNamespace(config: Pick<EdgeConfig, "kvSharing" | "relaySecret">, input: CacheNamespaceInput): Promise<RoutingNamespace> {
  const cacheSalt = await cacheSaltFor(config, input);
  return { cacheSalt, tag: cacheSalt === null ? null : tagOf(cacheSalt) };
}

/**
 * Namespaced words of the hash pieces a cache keeps across turns (the prompt-prefix cache's or the
 * media view hashes'), one namespace per piece (a conversation is one tenant's; "" for the plain
 * hashes), kept as runs along each chain of pieces: a piece's run says where its chain's words end
 * in a buffer shared with the pieces before it, so a request's cached pieces join by copying one
 * array per segment (the pieces shared along a conversation up to where it branches), not one per
 * piece, and a new turn converts only its new blocks. A piece that goes on from the last one of its
 * buffer appends to it; a buffer too small for the new words is replaced by one twice the needed
 * size, so rebuilding a chain (another salt, a chain never routed) copies each word a bounded number
 * of times. A run keeps only the buffer it was written into, never a later, longer one: each buffer
 * is at most twice the words of any run in it, and the buffers of one segment double, so what the
 * runs of held pieces keep reachable is at most 4 × the words of their chains, whatever later
 * pieces grew the segment and were evicted since. A piece's run is made once and never replaced:
 * runs are of the salt of the first request that routed the piece's chain, and a request in
 * another salt (a tenant's base and adapter requests share pieces) converts its words fresh and
 * keeps none, as does one whose chain is not its runs'. Replacing runs would leave each branch
 * routed before holding its own copy of the shared prefix's words (branches × prefix reachable,
 * the prefix counted once). The cache owning the pieces counts them in its byte budget
 * (block-hash.ts routedCopyBytes: 8 B a hash plus 384 B a piece, against ~100 B a run; none for a
 * piece without hashes, which gets no run), so the runs keep reachable at most 4 × the words it
 * counts: up to 32 B a counted hash. A branch (a piece going on from one that is not its buffer's
 * last) starts a buffer of its own with its words only, reading the words before it from its
 * parent's run.
 */
interface RoutedBuffer {
  /** The segment's words from its start, exactly up to `used`, spare capacity after. */
  readonly words: BigUint64Array;
  used: number;
  /**
   * Whether the segment grows from this buffer (false once a longer copy took it over): a sibling
   * of the piece that grew it starts a buffer of its own instead of copying the words again (a copy
   * for each sibling). Branches are safe by `used`: a piece appends only where its parent's run ends it.
   */
  open: boolean;
  /** The run the segment's first piece went on from (null: the chain's start). */
  readonly before: RoutedRun | null;
}

interface RoutedRun {
  readonly salt: string;
  readonly piece: readonly bigint[];
  /** The run of the chain's previous piece with hashes (null: none). */
  readonly prev: RoutedRun | null;
  readonly buffer: RoutedBuffer;
  /** Where this piece's words end in its buffer's words. */
  readonly end: number;
  /** Words of the chain through this piece. */
  readonly total: number;
}

let routedRuns = new WeakMap<readonly bigint[], RoutedRun>();

/**
 * Forgets every kept run: a sampled check found routed words wrong (edge/chat/exactness-check.ts),
 * and any run may share that buffer. Later requests convert their pieces again.
 */
export function forgetRoutedRuns(): void {
  routedRuns = new WeakMap();
}
/** Words written into run buffers in this isolate (new words and the copies of grown buffers). */
let routedWordsWritten = 0;

/** What the routed runs wrote, for tests: a chain rebuilt must write each of its words a bounded number of times. */
export function routedRunStats(): { wordsWritten: number } {
  return { wordsWritten: routedWordsWritten };
}

/**
 * A request's plain local block hashes; `hashPieces`: the same hashes in the pieces a cache keeps
 * across turns (the prompt-prefix cache's or the media view's, all but the last kept there).
 * `localHashes` may be built when read (joined from the pieces): it is read only when needed.
 */
export interface PlainHashes {
  readonly localHashes: readonly bigint[];
  readonly hashPieces?: readonly (readonly bigint[])[];
}

/**
 * The request's local block hashes moved into its namespace (the plain ones when unsalted), in the
 * form the route sends (route.ts). With pieces: one BigUint64Array of earlier turns' converted
 * runs and this turn's, the plain hashes never joined and no BigInt made per block (joining and
 * converting them all would be work a request in proportion to the whole history).
 */
export function routedHashes(ns: RoutingNamespace, plain: PlainHashes): LocalHashes {
  const tag = ns.cacheSalt === null ? null : ns.tag;
  const pieces = plain.hashPieces;
  if (!pieces || pieces.length < 2) return tag === null ? plain.localHashes : namespacedLocalHashes(plain.localHashes, tag);
  const salt = tag === null ? "" : ns.cacheSalt!;
  const last = pieces.length - 1;
  // The latest cached piece with a run, then runs for the pieces after it (they have none; runs
  // are made along a chain from its start, so the pieces before it have theirs). Another salt's run, or a chain that differs: words made
  // fresh, no run kept (runs are never replaced, see above).
  let run: RoutedRun | null = null;
  let k = last - 1;
  for (; k >= 0; k--) {
    const r = routedRuns.get(pieces[k]!);
    if (!r) continue;
    if (r.salt !== salt || !chainIs(r, pieces, k)) return freshWords(pieces, tag);
    run = r;
    break;
  }
  // The last piece is this request's own (not cached): nothing to keep a run for.
  for (let j = k + 1; j < last; j++) if (pieces[j]!.length > 0) run = extendRun(run, pieces[j]!, tag, salt);
  const fresh = namespacedLocalHashWords(pieces[last]!, tag);
  const total = run ? run.total : 0;
  const out = new BigUint64Array(total + fresh.length);
  for (let r = run; r; r = r.buffer.before) out.set(r.buffer.words.subarray(0, r.end), r.total - r.end);
  out.set(fresh, total);
  return out;
}

/** The pieces' words in the namespace, each converted now (linear in the chain), no run kept. */
function freshWords(pieces: readonly (readonly bigint[])[], tag: NamespaceTag): BigUint64Array {
  let total = 0;
  for (const p of pieces) total += p.length;
  const out = new BigUint64Array(total);
  let at = 0;
  for (const p of pieces) {
    out.set(namespacedLocalHashWords(p, tag), at);
    at += p.length;
  }
  return out;
}

/** Whether `run`'s chain is the pieces with hashes of pieces[0, k] (compared by identity). */
function chainIs(run: RoutedRun, pieces: readonly (readonly bigint[])[], k: number): boolean {
  let r: RoutedRun | null = run;
  for (let j = k; j >= 0; j--) {
    if (pieces[j]!.length === 0) continue;
    if (r === null || r.piece !== pieces[j]) return false;
    r = r.prev;
  }
  return r === null;
}

/** The run of `piece` going on from `prev` (null: the chain's first piece with hashes), kept for it. */
function extendRun(prev: RoutedRun | null, piece: readonly bigint[], tag: NamespaceTag, salt: string): RoutedRun {
  const words = namespacedLocalHashWords(piece, tag);
  let buffer: RoutedBuffer;
  let end = words.length;
  if (prev && prev.buffer.open && prev.end === prev.buffer.used) {
    // prev ends its buffer: append (its other runs read the words before `used`, never written again).
    buffer = prev.buffer;
    end = prev.end + words.length;
    if (end > buffer.words.length) {
      const grown = new BigUint64Array(2 * end);
      grown.set(buffer.words.subarray(0, prev.end));
      routedWordsWritten += prev.end;
      buffer.open = false;
      buffer = { words: grown, used: prev.end, open: true, before: buffer.before };
    }
    buffer.words.set(words, prev.end);
    buffer.used = end;
  } else {
    buffer = { words: new BigUint64Array(2 * words.length), used: words.length, open: true, before: prev };
    buffer.words.set(words);
  }
  routedWordsWritten += words.length;
  const run: RoutedRun = { salt, piece, prev, buffer, end, total: (prev?.total ?? 0) + words.length };
  routedRuns.set(piece, run);
  return run;
}

/**
 * Words the runs of `pieces` keep reachable (each buffer once, through every run before them): what
 * the bound above is about, for tests.
 */
export function routedRunWords(pieces: Iterable<readonly bigint[]>): number {
  const seen = new Set<RoutedBuffer>();
  const runs = new Set<RoutedRun>();
  let words = 0;
  for (const piece of pieces) {
    for (let r = routedRuns.get(piece) ?? null; r && !runs.has(r); r = r.prev) {
      runs.add(r);
      if (seen.has(r.buffer)) continue;
      seen.add(r.buffer);
      words += r.buffer.words.length;
    }
  }
  return words;
}

/** routedHashes as BigInts (admin explain, completions): the plain ones when unsalted. */
export function namespacedHashes(ns: RoutingNamespace, plain: PlainHashes): readonly bigint[] {
  if (ns.tag === null || ns.cacheSalt === null) return plain.localHashes;
  const routed = routedHashes(ns, plain);
  return routed instanceof BigUint64Array ? Array.from(routed) : routed;
}

/**
 * A media item's identity hash (the `mm_hashes` entry, whose value also gives the item's pad tokens)
 * moved into the namespace: the edge's routed tokens and the worker's cached ones use the same value.
 */
export function namespacedItemHash(hash: bigint, tag: NamespaceTag): bigint {
  return tag === null ? hash : namespacedLocalHash(hash, tag);
}
