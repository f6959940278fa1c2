// Types for the TypeScript importers of replay-fetch.mjs (its test).
export function closedBeforeResponse(error: unknown): boolean;
export const REPLAY_TIMEOUT_MS: number;
export function replayFetch(url: string, init: RequestInit, timeoutMs?: number): Promise<{ response: Response; start: number }>;
export function replayRetries(): number;
