// Types for the TypeScript importers of replay-fetch.mjs (its test).
export function closedBeforeResponse(error: unknown): boolean;
export function replayFetch(url: string, init: RequestInit): Promise<{ response: Response; start: number }>;
export function replayRetries(): number;
