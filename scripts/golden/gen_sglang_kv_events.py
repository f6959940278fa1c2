"""
Encodes KV-event batches with SGLang's own wire structs (msgspec), for test/fixtures/sglang-kv-events.json.

The struct shapes restate sgl-project/sglang `python/sglang/srt/disaggregation/kv_events.py`
(EventBatch / KVCacheEvent array_like + tag; BlockStored; BlockStoredMetadata {cache_salt};
BlockStoredWithMetadata(BlockStored, tag="BlockStored", kw_only=True) with a trailing `metadata`;
BlockRemoved; AllBlocksCleared). The page contents follow `mem_cache/events.py`
`_record_store_event` @ cc6971b7 (bigram pages are sent as `(raw[j], raw[j+1])` pairs; lora_id is
always None), the coalescing of `KVCacheEventRecorder.enqueue` (consecutive pages of one chain in one
BlockStored) and the hash chain of `mem_cache/utils.py` (`get_hash_str`: SHA-256 over the prior
digest's raw bytes then every token, or every element of a pair, as little-endian u32;
`hash_str_to_int64`: first 16 hex digits as a signed int64; `compute_node_event_hash_values`: a
salted chain starts from sha256(b"sglang-cache-salt-v1\\0" + salt)).

Run: python3 scripts/golden/gen_sglang_kv_events.py > test/fixtures/sglang-kv-events.json
(needs msgspec; made with msgspec 0.22.0, Python 3.11.)
"""

import hashlib
import json
import sys
from typing import Optional

import msgspec

from sglang_kv_structs import AllBlocksCleared, BlockRemoved, BlockStored, BlockStoredMetadata, BlockStoredWithMetadata, EventBatch


def page_digest(items, prior: Optional[bytes]) -> bytes:
    h = hashlib.sha256()
    if prior:
        h.update(prior)
    for t in items:
        for e in (t if isinstance(t, tuple) else (t,)):
            h.update(e.to_bytes(4, "little", signed=False))
    return h.digest()


def to_int64(d: bytes) -> int:
    v = int(d.hex()[:16], 16)
    return v - 2**64 if v >= 2**63 else v


def salt_seed(salt: Optional[str]) -> Optional[bytes]:
    return None if salt is None else hashlib.sha256(b"sglang-cache-salt-v1\0" + salt.encode("utf-8")).digest()


def pages(raw: list[int], page: int, bigram: bool):
    """Whole pages of the radix key of `raw` (bigram: len(raw) - 1 pairs)."""
    keys = [(raw[j], raw[j + 1]) for j in range(len(raw) - 1)] if bigram else list(raw)
    n = len(keys) // page * page
    return [keys[i : i + page] for i in range(0, n, page)]


def chain(raw, page, bigram=False, salt=None):
    prior = salt_seed(salt)
    out = []
    for p in pages(raw, page, bigram):
        prior = page_digest(p, prior)
        out.append((to_int64(prior), p))
    return out


def stored(h, parent, tokens, page, salt, coalesce=False, medium="GPU"):
    args = dict(block_hashes=h, parent_block_hash=parent, token_ids=tokens, block_size=page, lora_id=None, medium=medium)
    if salt is None:
        return BlockStored(**args)
    return BlockStoredWithMetadata(**args, metadata=BlockStoredMetadata(cache_salt=salt))


def events_for(raw, page, bigram=False, salt=None, coalesce=False):
    c = chain(raw, page, bigram, salt)
    evs, parent = [], None
    if coalesce:
        toks = [t for _, p in c for t in p]
        evs.append(stored([h for h, _ in c], None, toks, page, salt))
    else:
        for h, p in c:
            evs.append(stored([h], parent, list(p), page, salt))
            parent = h
    return c, evs


def expected(c, page, bigram, salt, coalesce):
    firsts = lambda p: [t[0] for t in p] if bigram else list(p)
    if coalesce:
        return [{"type": "BlockStored", "blockHashes": [str(h) for h, _ in c], "parent": None,
                 "tokenIds": [t for _, p in c for t in firsts(p)], "blockSize": page, "cacheSalt": salt, "bigram": bigram}]
    out, parent = [], None
    for h, p in c:
        out.append({"type": "BlockStored", "blockHashes": [str(h)], "parent": parent, "tokenIds": firsts(p),
                    "blockSize": page, "cacheSalt": salt, "bigram": bigram})
        parent = str(h)
    return out


def hicache_tiers(enc, raw, page):
    """One chain through HiCache's tiers (mem_cache/hiradix_cache.py @9d147fd): stored on the GPU
    (L1827), backed up to host memory (`_finish_write_through_ack` L853-862: BlockStored CPU_PINNED),
    the node evicted from the GPU with its host copy kept (`_detach_backuped` L1139-1149:
    BlockRemoved GPU, every page of the node), then from host memory (`evict_host`: BlockRemoved
    CPU_PINNED); DISK and EXTERNAL, declared by StorageMedium but not sent at that pin, last."""
    c = chain(raw, page)
    hashes = [h for h, _ in c]
    evs, exp, parent = [], [], None
    for medium in ("GPU", "CPU_PINNED"):
        parent = None
        for h, p in c:
            evs.append(stored([h], parent, list(p), page, None, medium=medium))
            exp.append({"type": "BlockStored", "blockHashes": [str(h)], "parent": parent if parent is None else str(parent),
                        "tokenIds": list(p), "blockSize": page, "cacheSalt": None, "bigram": False, "medium": medium})
            parent = h
    for medium in ("GPU", "CPU_PINNED", "DISK", "EXTERNAL"):
        evs.append(BlockRemoved(block_hashes=hashes, medium=medium))
        exp.append({"type": "BlockRemoved", "blockHashes": [str(h) for h in hashes], "medium": medium})
    payload = enc.encode(EventBatch(ts=1767225600.5, events=evs, attn_dp_rank=0))
    return {"name": "hicache_tiers", "raw": raw, "pageSize": page, "payloadHex": payload.hex(), "events": exp}


def main():
    enc = msgspec.msgpack.Encoder()
    page = 4
    raw = [151644, 872, 198, 9707, 11, 1879, 0, 77, 1000003, 1000003, 42, 7]  # 12 tokens
    cases = []
    for name, bigram, salt, coalesce in [
        ("plain", False, None, False),
        ("plain_coalesced", False, None, True),
        ("salted", False, "tenant-a", False),
        ("salted_coalesced", False, "tenant-a", True),
        ("bigram", True, None, False),
        ("bigram_coalesced", True, None, True),
        ("bigram_salted", True, "tenant-b", False),
    ]:
        c, evs = events_for(raw, page, bigram, salt, coalesce)
        exp = expected(c, page, bigram, salt, coalesce)
        if name == "plain":
            evs += [BlockRemoved(block_hashes=[c[-1][0]], medium="GPU"), AllBlocksCleared()]
            exp += [{"type": "BlockRemoved", "blockHashes": [str(c[-1][0])]}, {"type": "AllBlocksCleared"}]
        payload = enc.encode(EventBatch(ts=1767225600.5, events=evs, attn_dp_rank=0))
        cases.append({"name": name, "raw": raw, "pageSize": page, "payloadHex": payload.hex(), "events": exp})
    cases.append(hicache_tiers(enc, raw, page))
    json.dump({"generator": "scripts/golden/gen_sglang_kv_events.py", "msgspec": msgspec.__version__, "cases": cases}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
