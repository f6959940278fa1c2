/**
 * Each media item's routed form (its identity hash in the request's namespace, its layout pieces,
 * `mm_hashes` entry and pad value), kept per isolate: a conversation's earlier images and videos
 * are laid out once, not on every turn. The form is a function of the pool's cohort (its contract
 * digest names the contract), the namespace, and the item's content digest and metadata, which
 * together are the key; an entry is never shared across namespaces. Bounded by estimated bytes, LRU.
 */
import { namespaceTagHex, type NamespaceTag } from "../../blocks/block-hash.ts";
import { routedItem, type Ineligible, type MediaItem, type RoutedItem, type WorkerContract } from "../../layout/index.ts";
import { ByteLru } from "../../util/byte-lru.ts";
import { namespacedItemHash } from "../cache-salt.ts";
import { mediaItems, type VerifiedMedia } from "../media.ts";

/** Estimated bytes of all entries (an image's a few hundred bytes, a long video's pieces a few kB). */
export const ROUTED_ITEMS_MAX_BYTES = 1024 * 1024;

interface Routed {
  item: MediaItem;
  routed: RoutedItem | Ineligible;
  bytes: number;
}

const memo = new ByteLru<string, Routed>(ROUTED_ITEMS_MAX_BYTES);
const counts = { computed: 0, reused: 0, keysBuilt: 0 };

/** Items laid out (computed) and taken from the memo (reused) in this isolate, memo keys built (an item remembered across turns keeps its key), and what the memo holds. */
export function routedItemStats(): { computed: number; reused: number; keysBuilt: number; entries: number; bytes: number; maxBytes: number } {
  return { ...counts, entries: memo.size, bytes: memo.bytes, maxBytes: memo.maxBytes };
}

/** The key (UTF-16), the item and its probe, each piece (a timestamp text at most a few characters) and the entry. */
function entryBytes(key: string, r: RoutedItem | Ineligible): number {
  return 2 * key.length + (r.ok ? 48 * r.pieces.length + 2 * r.mmHash.length : 2 * r.detail.length) + 400;
}

/**
 * Each remembered item's last key (media-memo.ts gives a conversation's earlier items as the same
 * objects every turn): handing the memo the same string object lets it use the string's cached hash,
 * so a turn builds and hashes keys only for its new items. Weak: kept while the item is.
 */
const keys = new WeakMap<VerifiedMedia, { cohortDigest: string; tag: string; key: string }>();

function keyOf(m: VerifiedMedia, cohortDigest: string, tag: string): string | null {
  const md = m.metadata;
  if (!md || !m.digest) return null;
  const last = keys.get(m);
  if (last && last.cohortDigest === cohortDigest && last.tag === tag) return last.key;
  const shape = md.modality === "image" ? `${md.width}x${md.height}` : `${md.width}x${md.height}x${md.totalFrames}@${md.avgFps}`;
  const key = `${cohortDigest}\u0000${tag}\u0000${md.modality}\u0000${m.digest}\u0000${shape}`;
  counts.keysBuilt++;
  keys.set(m, { cohortDigest, tag, key });
  return key;
}

/** The layout's items of a request and each one's routed form, prompt order; `unresolved`: the first item without an identity (routing falls back). */
export interface RoutedItems {
  items: MediaItem[];
  routed: (RoutedItem | Ineligible)[];
  unresolved: { reason: string; detail: string } | null;
}

/** A pool's cohort: its worker contract and that contract's digest. */
export interface ItemCohort {
  contract: WorkerContract;
  digest: string;
}

/** One item with its hash moved into the namespace of `itemTag`, and its routed form. */
function laidOut(plain: MediaItem, contract: WorkerContract, itemTag: NamespaceTag): { item: MediaItem; routed: RoutedItem | Ineligible } {
  const item = plain.hash === null ? plain : { ...plain, hash: namespacedItemHash(plain.hash, itemTag) };
  return { item, routed: routedItem(contract, item) };
}

/**
 * The layout's items (hashes in the namespace of `itemTag`) and each one's routed form, in prompt
 * order; `unresolved`: the first item without an identity (routing falls back).
 */
export function routeItems(media: readonly VerifiedMedia[], cohort: ItemCohort, itemTag: NamespaceTag): RoutedItems {
  const tag = namespaceTagHex(itemTag);
  const found: (Routed | undefined)[] = [];
  const itemKeys: (string | null)[] = [];
  let missing: number[] | null = null;
  // Found entries become the most recent, in prompt order.
  for (let i = 0; i < media.length; i++) {
    const k = keyOf(media[i]!, cohort.digest, tag);
    const r = k === null ? undefined : memo.get(k);
    itemKeys.push(k);
    found.push(r);
    if (!r) (missing ??= []).push(i);
  }
  if (missing) {
    // Identity hashes of the items not found only (mediaItems also names the first unresolved one:
    // every item without an identity is among them).
    const fresh = mediaItems(missing.map((i) => media[i]!), cohort.digest);
    if (fresh.unresolved) return { items: [], routed: [], unresolved: fresh.unresolved };
    // Counted once the request is known to route by its items (a fallback reuses nothing).
    counts.reused += media.length - missing.length;
    for (let m = 0; m < missing.length; m++) {
      const i = missing[m]!;
      const k = itemKeys[i]!;
      // Laid out now, unless an earlier item of this request had the same content.
      let r = memo.get(k);
      if (!r) {
        counts.computed++;
        const { item, routed: form } = laidOut(fresh.items[m]!, cohort.contract, itemTag);
        r = { item, routed: form, bytes: entryBytes(k, form) };
        memo.set(k, r, r.bytes);
      } else counts.reused++;
      found[i] = r;
    }
  } else counts.reused += media.length;
  const items: MediaItem[] = [];
  const routed: (RoutedItem | Ineligible)[] = [];
  for (let i = 0; i < found.length; i++) {
    items.push(found[i]!.item);
    routed.push(found[i]!.routed);
  }
  return { items, routed, unresolved: null };
}

/**
 * The same as routeItems, every item identified and laid out again, without the memo (what a
 * sampled request checks the memo's forms against: chat/exactness-check.ts).
 */
export function wholeRoutedItems(media: readonly VerifiedMedia[], cohort: ItemCohort, itemTag: NamespaceTag): RoutedItems {
  const plain = mediaItems(media, cohort.digest);
  if (plain.unresolved) return { items: [], routed: [], unresolved: plain.unresolved };
  const items: MediaItem[] = [];
  const routed: (RoutedItem | Ineligible)[] = [];
  for (const p of plain.items) {
    const r = laidOut(p, cohort.contract, itemTag);
    items.push(r.item);
    routed.push(r.routed);
  }
  return { items, routed, unresolved: null };
}

/**
 * Forgets the memo's entries of these items under this cohort and namespace (found wrong by a
 * sampled check), by the key the item was last looked up with and by its key built again (either
 * may be what gave the wrong form); how many entries were dropped.
 */
export function forgetRoutedItems(media: readonly VerifiedMedia[], cohortDigest: string, itemTag: NamespaceTag): number {
  const tag = namespaceTagHex(itemTag);
  let dropped = 0;
  for (const m of media) {
    const last = keys.get(m)?.key;
    keys.delete(m);
    if (last !== undefined && memo.delete(last)) dropped++;
    const rebuilt = keyOf(m, cohortDigest, tag);
    if (rebuilt !== null && memo.delete(rebuilt)) dropped++;
  }
  return dropped;
}
