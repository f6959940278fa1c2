/** A simulated worker's radix-cache event (PagedRadixCache's sink) as the KV event its relay receives from SGLang, on the GPU tier. */
export function relayKvEvent(ev) {
  return ev.type === "BlockStored"
    ? { type: "BlockStored", blockHashes: [ev.hash], parentBlockHash: ev.parent, tokenIds: ev.tokens, blockSize: ev.blockSize, medium: "GPU" }
    : ev.type === "BlockRemoved"
      ? { type: "BlockRemoved", blockHashes: ev.hashes, medium: "GPU" }
      : { type: "AllBlocksCleared" };
}
