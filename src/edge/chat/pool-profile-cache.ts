/** Each pool's profile (its cohort contract), cached per isolate: a DO round trip per request would be wasteful. */
import type { ChatFrontDoor, PoolProfile } from "../../routing-index/front-door.ts";

const profiles = new Map<string, { at: number; value: PoolProfile }>();

export async function cachedPoolProfile(index: ChatFrontDoor, model: string, ttlMs: number): Promise<PoolProfile> {
  const hit = profiles.get(model);
  const now = Date.now();
  if (hit && now - hit.at < ttlMs) return hit.value;
  const value = await index.profile();
  profiles.set(model, { at: now, value });
  return value;
}
