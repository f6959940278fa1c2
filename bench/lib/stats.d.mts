// Types for the TypeScript importers of stats.mjs (the tests share its seeded PRNG).
export function rng(seed: number): () => number;
