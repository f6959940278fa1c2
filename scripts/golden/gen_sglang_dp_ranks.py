"""
Writes test/fixtures/sglang-dp-ranks.json: what SGLang's own code produces for attention-DP ranks,
restated from sgl-project/sglang @9d147fd (read through the mirror zyzshishui/sglang):

- python/sglang/srt/disaggregation/kv_events.py
  - EventBatch(ts, events, attn_dp_rank) and BlockStored/BlockRemoved/AllBlocksCleared: msgspec
    structs, array_like, events tagged (L61-123); ZmqEventPublisher.publish stamps the publisher's
    rank into a batch that has none.
  - ZmqEventPublisher.offset_endpoint_port: a tcp endpoint's port + rank (rank 0 unchanged); applied
    to both the PUB and the replay endpoint in __init__. select_kv_publisher_dp_rank (L39-58): the
    rank is attn_dp_rank under DP attention, dp_rank under pure DP.
- python/sglang/srt/managers/io_struct.py GenerateReqInput (L245-254): the rank fields of /generate.

Run: python3 scripts/golden/gen_sglang_dp_ranks.py  (needs msgspec)
"""
import json
import os
from typing import Optional, Union

import msgspec

from sglang_kv_structs import BlockRemoved, BlockStored, EventBatch


class KVEventBatch(EventBatch):
    events: list[Union[BlockStored, BlockRemoved]]


def offset_endpoint_port(endpoint: Optional[str], data_parallel_rank: int) -> Optional[str]:
    if not endpoint or data_parallel_rank == 0:
        return endpoint
    if "inproc" in endpoint:
        return f"{endpoint}_dp{data_parallel_rank}"
    last_colon = endpoint.rfind(":")
    return f"{endpoint[:last_colon]}:{int(endpoint[last_colon + 1:]) + data_parallel_rank}"


def batch_case(name: str, rank: int) -> dict:
    events = [
        BlockStored(block_hashes=[-4242], parent_block_hash=None, token_ids=[1, 2, 3, 4], block_size=4, lora_id=None, medium="GPU"),
        BlockRemoved(block_hashes=[-4242], medium="GPU"),
    ]
    payload = msgspec.msgpack.encode(KVEventBatch(ts=1.25, events=events, attn_dp_rank=rank))
    return {"name": name, "rank": rank, "ts": 1.25, "payloadHex": payload.hex()}


def main() -> None:
    fixture = {
        "source": "sgl-project/sglang@9d147fd disaggregation/kv_events.py, managers/io_struct.py",
        "batches": [batch_case("rank0", 0), batch_case("rank1", 1), batch_case("rank3", 3)],
        "ports": [
            {"endpoint": ep, "rank": r, "offset": offset_endpoint_port(ep, r)}
            for ep in ("tcp://*:5557", "tcp://*:5558", "tcp://10.0.0.7:6000")
            for r in range(4)
        ],
        # GenerateReqInput's rank fields at this pin (data_parallel_rank is no longer read by /generate).
        "generateReqInputRankFields": ["routed_dp_rank", "disagg_prefill_dp_rank"],
    }
    out = os.path.join(os.path.dirname(__file__), "..", "..", "test", "fixtures", "sglang-dp-ranks.json")
    with open(out, "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
