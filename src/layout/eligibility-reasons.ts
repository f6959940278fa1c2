/**
 * Named reasons a request (or a worker pool) falls back to text-prefix routing. None fails the
 * request by itself, except that the edge refuses a `worker_would_reject` item (the pool's own
 * processor raises on it, so forwarding could only end in the worker's rejection).
 */
export type IneligibleReason =
  // request shape (docs/layout.md, "Fail-closed reasons")
  | "mm_processor_kwargs"
  | "media_uuids"
  | "audio"
  | "adjacent_videos"
  | "unsupported_media"
  // media resolution
  | "unresolved_media"
  | "unprobeable_video"
  // layout
  | "placeholder_mismatch"
  | "single_frame_video"
  | "worker_would_reject"
  | "unpredictable_geometry"
  | "too_many_tokens"
  // model / contract / cohort
  | "unsupported_model"
  | "geometry_mismatch"
  | "unsupported_processor_config"
  | "unsupported_engine_version"
  | "no_contract"
  | "invalid_contract"
  | "cross_engine_contract"
  | "dual_contracts"
  | "contract_disagreement"
  | "worker_rejects_mm_hashes";

export interface Ineligible {
  ok: false;
  reason: IneligibleReason;
  detail: string;
  /** The media item (prompt order) the reason is about, when it is about one. */
  item?: number;
}

export function ineligible(reason: IneligibleReason, detail: string): Ineligible {
  return { ok: false, reason, detail };
}
