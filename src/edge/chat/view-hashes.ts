/**
 * A media request's routed view (template tokens with each media triplet expanded into its item's
 * layout, every media token set to the item's pad value) and its block hashes, built only for the
 * new template tokens: per isolate, the view of each piece of a conversation's template tokens that
 * the prompt-prefix cache keeps (src/prompt/prefix-cache.ts, EncodedPrompt.idPieces: one per turn,
 * up to its generation prompt, the same array object on every later turn) is kept as its full
 * blocks' local hashes and the tokens after its last full block.
 *
 * Exact: a kept piece is found by the identity of its template ids (never modified) and of every
 * piece before it, and used only while the items its placeholders took are equal (modality, layout
 * pieces, pad value) to the request's at the same positions, so its view is the one expanding the
 * request would give; a local block hash is a function of the block's tokens only (block-hash.ts).
 * Nothing is compared token by token, copied or expanded for the kept pieces: a hit costs the new
 * template tokens, their items and blocks, plus a walk over the conversation's pieces and items.
 * Each kept piece's hashes array is the same object on every later turn (cache-salt.ts namespaces it
 * once). Entries are per scope (model, contract, block size, namespace): no entry serves two tenants.
 * Bounded by estimated bytes, LRU.
 */
import { localBlockHashesOfParts, routedCopyBytes } from "../../blocks/block-hash.ts";
import { expandPiece, itemCountMismatch, expandPrompt, type ExpandItem } from "../../layout/expand.ts";
import type { EncodeText, LayoutPiece } from "../../layout/layout.ts";
import type { VisionTokenIds } from "../../layout/model-geometry.ts";
import { HeldChains } from "../../util/held-chains.ts";

/** Estimated bytes of all kept views (keptPieceBytes: ~40 B a block hash with its routed copy, no tokens): ~80 conversations of 32k routed tokens at block size 16 (~100 KB each, in ~15 turns of an image). */
export const DEFAULT_VIEW_HASHES_BYTES = 8 * 1024 * 1024;

/**
 * Estimated bytes a kept piece holds in V8: its block hashes (a BigInt of 24 B and an 8 B slot each)
 * and their routed copy (routedCopyBytes), its tail tokens, its items (the request's item objects
 * and their layouts, ~400 B an item, ~16 B more a layout piece: a layout's pieces are mostly the
 * item memo's, shared), its scope string, and the node, its bucket, index and LRU entries (448 B).
 * Measured in Node 22 (no pointer compression) by what a full GC frees when a 4 MiB cache is
 * dropped after routed vision chats of 8 shapes (pieces of 4–120 blocks, 1–3 images or a video of
 * 60–460 frames a turn, salted and not; the prompt-prefix cache at 2.5 × its budget, as the
 * defaults): least squares gave 32.1 B a hash, 434 B a piece, 394 B an item and 17 B a layout piece,
 * and this estimate is 0.93–1.14 of the freed bytes on every shape. Not counted: ~70 B for each
 * template piece the prompt-prefix cache still holds after its view was dropped (its WeakMap
 * entries), bounded by that cache's pieces.
 */
function keptPieceBytes(hashes: number, tailTokens: number, items: number, layoutPieces: number, scopeChars: number): number {
  return 32 * hashes + routedCopyBytes(hashes) + 4 * tailTokens + 400 * items + 16 * layoutPieces + 2 * scopeChars + 448;
}

interface Node {
  parent: Node | null;
  scope: string;
  /** The template piece this view is of (pieceIds), and how many pieces the chain has up to it. */
  pieceId: number;
  depth: number;
  /** Items taken by placeholders before this piece, and by this piece's own. */
  itemStart: number;
  items: readonly ExpandItem[];
  /** View length up to this piece's end; the tokens after its last full block. */
  end: number;
  tail: Uint32Array;
  /** Local hashes of blocks [parent.end / block size, end / block size), rounded down. */
  hashes: bigint[];
  /** The kept pieces found under the same template piece (this node among them). */
  bucket: Node[];
  /** What HeldChains counts: its hold along the tree (> 0 while a kept piece's chain includes it), and its estimated bytes. */
  holders: number;
  bytes: number;
}

export interface ViewInput {
  /**
   * Template ids (media placeholders not expanded) in pieces, as EncodedPrompt.idPieces gives them:
   * every piece but the last ends at a split point and may be kept for the next turn.
   */
  pieces: readonly (readonly number[])[];
  /** The request's items, prompt order (routeViewItems). */
  items: readonly ExpandItem[];
  ids: VisionTokenIds;
  encode: EncodeText;
  blockSize: number;
  /** What else the view's meaning depends on and who may share it (model, contract digest, namespace). */
  scope: string;
  /** Longest view routed on exactly (MAX_ROUTING_TOKENS): a longer one is `too_many_tokens` and nothing of it is kept. */
  maxTokens: number;
}

export type ViewHashes =
  | {
      ok: true;
      /** View tokens. */
      length: number;
      /** hashPieces joined (built when read: O(blocks), a copy). */
      readonly localHashes: bigint[];
      /** localHashes as consecutive pieces: kept pieces' own arrays (the same objects on every hit), then this request's. */
      hashPieces: bigint[][];
      /** Leading view tokens whose block hashes came from a kept piece. */
      reusedTokens: number;
    }
  | { ok: false; reason: "placeholder_mismatch" | "too_many_tokens"; detail: string };

export interface ViewHashStats {
  hits: number;
  misses: number;
  hashedBlocks: number;
  /** Template tokens expanded (scanned for placeholders and copied into the view). */
  expandedTokens: number;
  /** Kept pieces checked for identity and items compared against the request's, while looking up. */
  checkedPieces: number;
  comparedItems: number;
  /** Block hashes copied into one array (localHashes read). */
  joinedHashes: number;
  entries: number;
  bytes: number;
  maxBytes: number;
}

function chainOf(n: Node): Node[] {
  const out: Node[] = new Array<Node>(n.depth);
  for (let x: Node | null = n; x; x = x.parent) out[x.depth - 1] = x;
  return out;
}

function samePieces(a: readonly LayoutPiece[], b: readonly LayoutPiece[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    const p = a[i]!;
    const q = b[i]!;
    if (p.kind !== q.kind) return false;
    if (p.kind === "text" && p.text !== (q as typeof p).text) return false;
    if (p.kind === "pad" && (p.modality !== (q as typeof p).modality || p.count !== (q as typeof p).count)) return false;
  }
  return true;
}

/** The last `rem` tokens of carry ++ fresh. */
function lastTokens(carry: Uint32Array, fresh: Uint32Array, rem: number): Uint32Array {
  if (fresh.length >= rem) return fresh.slice(fresh.length - rem);
  const out = new Uint32Array(rem);
  out.set(carry.subarray(carry.length - (rem - fresh.length)));
  out.set(fresh, rem - fresh.length);
  return out;
}

const EMPTY = new Uint32Array(0);

function tooLong(length: number, maxTokens: number): ViewHashes {
  return { ok: false, reason: "too_many_tokens", detail: `the routed view is over ${maxTokens} tokens (${length} so far)` };
}

export class ViewHashCache {
  readonly maxBytes: number;
  /** Kept pieces by the template piece they are of (an object key: nothing is kept alive by it). */
  private readonly byPiece = new WeakMap<object, Node[]>();
  private readonly pieceIds = new WeakMap<object, number>();
  private nextPieceId = 1;
  /** The kept pieces (LRU) and the bytes their chains hold. */
  private readonly held: HeldChains<Node>;
  private s = { hits: 0, misses: 0, hashedBlocks: 0, expandedTokens: 0, checkedPieces: 0, comparedItems: 0, joinedHashes: 0 };

  constructor(maxBytes = DEFAULT_VIEW_HASHES_BYTES) {
    this.maxBytes = maxBytes;
    this.held = new HeldChains<Node>({ maxBytes, onDrop: (n) => n.bucket.splice(n.bucket.indexOf(n), 1) });
  }

  /**
   * The view's length and localBlockHashes(view, blockSize), or expandPrompt's mismatch, or
   * too_many_tokens (checked before anything is kept), from the longest kept run of the request's
   * pieces. Requires initHashing().
   */
  hashes(input: ViewInput): ViewHashes {
    const { pieces, items, blockSize, scope } = input;
    const last = pieces.length - 1;
    // Pieces that can be kept: all but the last, empty ones (no new split point) left out.
    const stable: (readonly number[])[] = [];
    const starts: number[] = [];
    let pos = 0;
    for (let i = 0; i < last; i++) {
      const p = pieces[i]!;
      if (p.length > 0) {
        stable.push(p);
        starts.push(pos);
      }
      pos += p.length;
    }
    const hit = this.lookup(stable, items, scope);
    const chain = hit ? chainOf(hit) : [];
    const localPieces: bigint[][] = chain.map((x) => x.hashes);
    let carry = hit ? hit.tail : EMPTY;
    let end = hit ? hit.end : 0;
    let itemPos = hit ? hit.itemStart + hit.items.length : 0;
    let parent = hit;
    const freshNodes: Node[] = [];
    // The new stable pieces (each kept for later turns), then the last piece (this request's own).
    const todo: { piece: readonly number[]; at: number; prev: number | undefined; next: number | undefined; keep: boolean }[] = [];
    for (let j = chain.length; j < stable.length; j++) {
      const at = starts[j]!;
      todo.push({ piece: stable[j]!, at, prev: j > 0 ? stable[j - 1]!.at(-1) : undefined, next: j + 1 < stable.length ? stable[j + 1]![0] : pieces[last]![0], keep: true });
    }
    todo.push({ piece: pieces[last]!, at: pos, prev: stable.at(-1)?.at(-1), next: undefined, keep: false });
    // Work counted once the result is this computation's (a triplet across pieces starts over: whole()).
    let expanded = 0;
    let hashed = 0;
    const counted = (r: ViewHashes): ViewHashes => {
      this.s.expandedTokens += expanded;
      this.s.hashedBlocks += hashed;
      return r;
    };
    for (const t of todo) {
      const ex = expandPiece(t.piece, items, itemPos, input.ids, input.encode, { base: t.at, prev: t.prev, next: t.next });
      expanded += t.piece.length;
      if (!ex.ok) return ex.reason === "piece_edge" ? this.whole(input) : counted(ex);
      if (end + ex.tokens.length > input.maxTokens) return counted(tooLong(end + ex.tokens.length, input.maxTokens));
      const total = carry.length + ex.tokens.length;
      const hashes = localBlockHashesOfParts([carry, ex.tokens], blockSize);
      hashed += hashes.length;
      localPieces.push(hashes);
      const pieceItems = items.slice(itemPos, itemPos + ex.items);
      itemPos += ex.items;
      end += ex.tokens.length;
      carry = lastTokens(carry, ex.tokens, total % blockSize);
      if (t.keep) {
        let layoutPieces = 0;
        for (const it of pieceItems) layoutPieces += it.pieces.length;
        const bytes = keptPieceBytes(hashes.length, carry.length, pieceItems.length, layoutPieces, scope.length);
        const node: Node = { parent, scope, pieceId: this.pieceId(t.piece), depth: (parent?.depth ?? 0) + 1, itemStart: itemPos - ex.items, items: pieceItems, end, tail: carry, hashes, bucket: [], holders: 0, bytes };
        freshNodes.push(node);
        parent = node;
      }
    }
    const count = itemCountMismatch(itemPos, items.length);
    if (count) return counted(count);
    if (hit) {
      this.s.hits++;
      // May be a piece no longer kept, only held by kept ones (an item after it changed): not kept again.
      this.held.touch(hit);
    } else this.s.misses++;
    // A piece over a quarter of the budget is not kept, nor any after it (they would hold it).
    for (let k = 0; k < freshNodes.length && this.held.admits(freshNodes[k]!.bytes); k++) this.store(freshNodes[k]!, todo[k]!.piece);
    return counted(this.result(end, localPieces, hit ? hit.end : 0));
  }

  /**
   * Drops every kept piece whose chain holds one of `hashPieces` (a result's: kept pieces' own
   * arrays): a sampled check found the view's hashes wrong (exactness-check.ts). The count dropped.
   */
  dropPiecesOf(hashPieces: readonly (readonly bigint[])[]): number {
    const pieces = new Set<object>(hashPieces);
    return this.held.dropWhere((n) => {
      for (let x: Node | null = n; x; x = x.parent) if (pieces.has(x.hashes)) return true;
      return false;
    });
  }

  stats(): ViewHashStats {
    return { ...this.s, entries: this.held.entries, bytes: this.held.bytes, maxBytes: this.maxBytes };
  }

  /** The deepest kept piece whose chain is the request's leading stable pieces and whose items equal the request's. */
  private lookup(stable: readonly (readonly number[])[], items: readonly ExpandItem[], scope: string): Node | null {
    for (let j = stable.length - 1; j >= 0; j--) {
      for (const n of this.byPiece.get(stable[j]!) ?? []) {
        if (n.scope !== scope || n.depth !== j + 1) continue;
        let same = true;
        for (let x: Node | null = n, i = j; x && same; x = x.parent, i--) {
          this.s.checkedPieces++;
          same = this.pieceIds.get(stable[i]!) === x.pieceId;
        }
        if (!same) continue;
        // The longest run from the start whose items are the request's (an earlier item changed: the pieces before it).
        // One kept piece per template piece, parent and scope (store() replaces): this chain is the only candidate.
        let good: Node | null = null;
        for (const x of chainOf(n)) {
          if (!this.sameItems(x, items)) break;
          good = x;
        }
        return good;
      }
    }
    return null;
  }

  private sameItems(x: Node, items: readonly ExpandItem[]): boolean {
    for (let i = 0; i < x.items.length; i++) {
      this.s.comparedItems++;
      const a = x.items[i]!;
      const b = items[x.itemStart + i];
      if (!b || (a !== b && (a.modality !== b.modality || a.padValue !== b.padValue || !samePieces(a.pieces, b.pieces)))) return false;
    }
    return true;
  }

  /** A triplet across two pieces (never at split points a template produces): the pieces joined, nothing kept. */
  private whole(input: ViewInput): ViewHashes {
    const joined = ([] as number[]).concat(...input.pieces);
    this.s.misses++;
    this.s.expandedTokens += joined.length;
    const ex = expandPrompt(joined, input.items, input.ids, input.encode);
    if (!ex.ok) return ex;
    if (ex.tokens.length > input.maxTokens) return tooLong(ex.tokens.length, input.maxTokens);
    const hashes = localBlockHashesOfParts([ex.tokens], input.blockSize);
    this.s.hashedBlocks += hashes.length;
    return this.result(ex.tokens.length, [hashes], 0);
  }

  /** The ok result; its pieces are joined only when localHashes is read (the chat path reads the pieces). */
  private result(length: number, hashPieces: bigint[][], reusedTokens: number): ViewHashes {
    const stats = this.s;
    let joined: bigint[] | null = null;
    return {
      ok: true,
      length,
      get localHashes() {
        if (joined) return joined;
        if (hashPieces.length === 1) return (joined = hashPieces[0]!);
        joined = ([] as bigint[]).concat(...hashPieces);
        stats.joinedHashes += joined.length;
        return joined;
      },
      hashPieces,
      reusedTokens,
    };
  }

  private pieceId(piece: object): number {
    let id = this.pieceIds.get(piece);
    if (id === undefined) this.pieceIds.set(piece, (id = this.nextPieceId++));
    return id;
  }

  private store(n: Node, piece: object): void {
    let bucket = this.byPiece.get(piece);
    // The same piece after the same parent with other items (an earlier item's bytes changed): the new view replaces it.
    const old = bucket?.find((x) => x.scope === n.scope && x.parent === n.parent);
    if (old) this.held.drop(old);
    if (!bucket) this.byPiece.set(piece, (bucket = []));
    n.bucket = bucket;
    bucket.push(n);
    this.held.keep(n);
    // The new piece goes last: its own chain alone over the budget (one conversation longer than all of it) is not kept.
    this.held.evictOverBudget();
  }
}

let shared: ViewHashCache | null = null;

/** The isolate's cache (edge/chat/layout.ts; its budget is listed in cache-budgets.ts). */
export function sharedViewHashes(): ViewHashCache {
  return (shared ??= new ViewHashCache());
}
