"""
SGLang's KV-event wire structs (msgspec), shared by gen_sglang_kv_events.py and
gen_sglang_dp_ranks.py. The shapes restate sgl-project/sglang
`python/sglang/srt/disaggregation/kv_events.py`: EventBatch and KVCacheEvent are array_like, events
are tagged by class name; BlockStoredWithMetadata(BlockStored, tag="BlockStored", kw_only=True)
carries a trailing `metadata` {cache_salt}.
"""
from typing import Any, Optional

import msgspec


class EventBatch(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: list[Any]
    attn_dp_rank: Optional[int] = None


class KVCacheEvent(msgspec.Struct, array_like=True, gc=False, tag=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: Optional[int]
    token_ids: list[int]
    block_size: int
    lora_id: Optional[int]
    medium: Optional[str] = None


class BlockStoredMetadata(msgspec.Struct, omit_defaults=True, gc=False):
    cache_salt: str


class BlockStoredWithMetadata(BlockStored, tag="BlockStored", kw_only=True):
    metadata: BlockStoredMetadata


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: Optional[str] = None


class AllBlocksCleared(KVCacheEvent):
    pass
