/**
 * How the edge names a client to the services behind it (the media store shares its slots by this
 * label, docs/media.md Fair shares): one label per API key, else per client network (rate-limit.ts
 * clientNetwork), as a digest, so neither the key nor the address leaves the edge.
 */
import { sha256 } from "../util/hash.ts";
import { bytesToHex } from "../util/hex.ts";

/** A client as the edge tells clients apart. */
export type ClientRef = { apiKey: string } | { network: string };

const utf8 = new TextEncoder();

/** 32 hex digits of SHA-256 over `text`'s UTF-8. */
function digest32(text: string): string {
  return bytesToHex(sha256(utf8.encode(text))).slice(0, 32);
}

/**
 * Most digests each memo keeps (with the key or network each is of); a full memo is emptied. Two
 * memos (labels, API-key digests): up to 2 × this many entries per isolate.
 */
export const CLIENT_NAME_MEMO_ENTRIES = 1024;

/** How many entries a memo holds now. */
type MemoSize = () => number;
const memoSizes: MemoSize[] = [];

/**
 * Digests of recent clients: a client sends request after request, and each needs its label
 * (admission, media) and its API key's digest (rate-limit and quota buckets), so an isolate hashes
 * a client once rather than once or more per request. Authenticated keys reach it (auth.ts), and so
 * do the network labels of any client where `/v1` is public: those are short (rate-limit.ts
 * clientNetwork keeps at most 64 characters of an address it cannot parse), and a flood of new ones
 * only empties the memo, back to one short SHA-256 per request.
 */
function memoized(f: (text: string) => string): (text: string) => string {
  const memo = new Map<string, string>();
  memoSizes.push(() => memo.size);
  return (text) => {
    let d = memo.get(text);
    if (d === undefined) {
      if (memo.size >= CLIENT_NAME_MEMO_ENTRIES) memo.clear();
      d = f(text);
      memo.set(text, d);
    }
    return d;
  };
}

const labelOf = memoized((name) => `c-${digest32(`kvedge-client\n${name}`)}`);

/** `c-` and 32 hex digits of SHA-256 over the key or network. Requires initHashing(). */
export function clientLabel(client: ClientRef): string {
  return labelOf("apiKey" in client ? `key\n${client.apiKey}` : `net\n${client.network}`);
}

/** 32 hex digits of SHA-256 over an API key: how rate-limit buckets name it (rate-limit.ts). Requires initHashing(). */
export const apiKeyDigest: (apiKey: string) => string = memoized(digest32);

/** Entries each memo holds now (labels, then API-key digests): how tests see the bound. */
export function clientNameMemoSizes(): number[] {
  return memoSizes.map((size) => size());
}
