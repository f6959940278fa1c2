/**
 * A conversation's first two turns served as the edge serves them (parse stage then prompt stage,
 * the read's bytes going with the lookup): the first body (messages[0, 2)) is stored, the second
 * (messages[0, 4)) hits it, and the chain holds the second body's bytes up to the hit's messages.
 */
import type { EdgeConfig } from "../../src/config/config.ts";
import { parseChatTurn } from "../../src/edge/chat/parse.ts";
import type { TurnChainCache } from "../../src/prompt/turn-chain.ts";

export function serveTwoTurns(chain: TurnChainCache, config: EdgeConfig, messages: readonly unknown[], partition: string): void {
  const model = config.models[0]!;
  const profile = { family: model.family, templateId: model.templateId };
  for (const n of [2, 4]) {
    const bytes = new TextEncoder().encode(JSON.stringify({ model: model.id, messages: messages.slice(0, n) }));
    const body = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes);
    const parsed = parseChatTurn(body, config, partition, { bytes }, chain);
    chain.prepare(parsed.req, body, profile, partition, { found: parsed.turn, validated: true });
  }
}
