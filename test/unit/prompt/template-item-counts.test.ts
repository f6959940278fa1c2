import { describe, expect, it } from "vitest";
import { renderTemplate, TemplateIdSchema, type TemplateId } from "../../../src/prompt/index.ts";
import { countersOnlyNumberItems, countsItemsOf, itemCountsIrrelevant, templateSource } from "../../../src/prompt/template.ts";

const IDS = TemplateIdSchema.options as readonly TemplateId[];

/** What the template renders for `tail` after a user message of `images` images and `videos` videos (that message's own text cut off). */
function after(id: TemplateId, images: number, videos: number, tail: Record<string, unknown>[], kwargs: Record<string, unknown>): string {
  const items = [...Array.from({ length: images }, () => ({ type: "image" })), ...Array.from({ length: videos }, () => ({ type: "video" }))];
  const standIn = { role: "user", content: items.length > 0 ? items : "" };
  const head = renderTemplate(id, { messages: [standIn], tools: null, kwargs });
  const whole = renderTemplate(id, { messages: [standIn, ...tail], tools: null, kwargs });
  const cut = head.lastIndexOf("<|im_start|>assistant\n");
  expect(whole.startsWith(head.slice(0, cut))).toBe(true);
  return whole.slice(cut);
}

const TAILS: Record<string, unknown>[][] = [
  [{ role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image" }] }],
  [{ role: "assistant", content: "A cat." }, { role: "user", content: [{ type: "video" }, { type: "image" }, { type: "text", text: "and these?" }] }],
  [{ role: "assistant", content: "", reasoning_content: "look", tool_calls: [{ type: "function", function: { name: "f", arguments: "{}" } }] }, { role: "tool", content: "done" }],
  [{ role: "user", content: "plain" }, { role: "assistant", content: "ok" }, { role: "user", content: [{ type: "image" }, { type: "image" }] }],
];

describe("template item counts", () => {
  it("every shipped template reads its counters only to number items under add_vision_id", () => {
    for (const id of IDS) expect(countersOnlyNumberItems(templateSource(id).text)).toBe(true);
  });

  it("any other read of a counter is seen", () => {
    const base = "{%- set image_count = namespace(value=0) %}{%- set image_count.value = image_count.value + 1 %}{%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}";
    expect(countersOnlyNumberItems(base)).toBe(true);
    expect(countersOnlyNumberItems(`${base}{{ image_count.value }}`)).toBe(false);
    expect(countersOnlyNumberItems(`${base}{% if image_count.value > 1 %}x{% endif %}`)).toBe(false);
    expect(countersOnlyNumberItems(`${base}{% set n = video_count.value %}`)).toBe(false);
    expect(countersOnlyNumberItems(`${base}{% set image_count.value = image_count.value + 2 %}`)).toBe(false);
    // A tag inside the block is not part of numbering.
    expect(countersOnlyNumberItems(`${base}{% if add_vision_id %}{% if image_count.value > 1 %}x{% endif %}{% endif %}`)).toBe(false);
  });

  it("add_vision_id set (any value but false or None) makes the counts matter", () => {
    for (const id of IDS) {
      expect(itemCountsIrrelevant(id, {})).toBe(true);
      expect(itemCountsIrrelevant(id, { add_vision_id: false, enable_thinking: true })).toBe(true);
      expect(itemCountsIrrelevant(id, { add_vision_id: null })).toBe(true);
      for (const v of [true, 1, "no", 0]) expect(itemCountsIrrelevant(id, { add_vision_id: v })).toBe(false);
    }
  });

  it("countsItemsOf names the roles whose items each template numbers (the later user item's number shows it)", () => {
    // Roles after preprocessing (developer → system, function → tool), first and after a user message.
    for (const id of IDS) {
      for (const role of ["system", "user", "assistant", "tool", "latest_reminder"]) {
        for (const [type, label] of [["image", "Picture"], ["video", "Video"]] as const) {
          for (const lead of [[], [{ role: "user", content: "hi" }]]) {
            const messages = [...lead, { role, content: [{ type: "text", text: "x" }, { type }] }, { role: "user", content: [{ type }, { type: "text", text: "y" }] }];
            const text = renderTemplate(id, { messages, tools: null, kwargs: { add_vision_id: true } });
            const numbers = [...text.matchAll(new RegExp(`${label} (\\d+): `, "g"))].map((m) => Number(m[1]));
            expect(numbers.at(-1), `${id} ${role} ${type} after ${lead.length}`).toBe(countsItemsOf(id, role) ? 2 : 1);
          }
        }
      }
    }
  });

  it("where irrelevant, what follows renders the same after any count of earlier items; with add_vision_id it does not", () => {
    for (const id of IDS) {
      for (const tail of TAILS) {
        const none = after(id, 0, 0, tail, {});
        expect(after(id, 7, 2, tail, {})).toBe(none);
        expect(after(id, 1, 0, tail, { add_vision_id: false })).toBe(none);
      }
      expect(after(id, 7, 2, TAILS[1]!, { add_vision_id: true })).not.toBe(after(id, 0, 0, TAILS[1]!, { add_vision_id: true }));
    }
  });
});
