#!/usr/bin/env python3
"""Whole-request golden set: the exact ids an SGLang worker builds for an OpenAI chat request.

For each case (a chat request as a client sends it, its media, the model family) this computes,
with upstream code wherever upstream code runs here:

  1. SGLang's chat normalisation (mirrored below, cited; SGLang itself is not installed on the
     machine that runs this): content parts, `Tool.model_dump()`, tool-call arguments,
     `chat_template_kwargs`, `reasoning_effort`, continue_final_message.
  2. The model's official chat template through transformers' `apply_chat_template` (tokenize=True,
     add_generation_prompt=True), HF `tokenizers` (the Qwen tokenizer.json, added tokens per family),
     then `tokenizer.decode` of those ids, which is the prompt SGLang hands its multimodal processor.
  3. The real transformers processor (`AutoProcessor` from the model-directory fixtures:
     Qwen2VLProcessor / Qwen2_5_VLProcessor / Qwen3VLProcessor with their image and video
     processors) on that prompt with the images as SGLang loads them and the videos as SGLang's
     `preprocess_video` samples and pre-resizes them (mirrored below, cited); Qwen3-VL gets
     `video_metadata` and `do_sample_frames=False` as SGLang passes them.
  4. SGLang's padding: every maximal run of image/video pad ids belongs to one item (a Qwen3-VL video
     owns one run per temporal group); items are all images in prompt order, then all videos; each
     run is overwritten with `1_000_000 + int(mm_hash, 16) % 2**30` of its item's mm_hash.
  5. The mm_hashes kvedge sends (its identity record v2, re-implemented here in Python from
     src/media/identity-record.ts' documented layout: SHA-256 of the raw bytes inside the record,
     the first 8 bytes of the record's SHA-256 as the hash, with hashlib) and the router's block
     hashes (xxh3-64, seed 1337, over little-endian u32 ids of each full 16-token block).

Media are made here, deterministically: images with PIL, videos with OpenCV's MJPG encoder into AVI.
They are written next to the golden file; the TypeScript test reads the same bytes.

Run (needs torch, torchvision, transformers, tokenizers, PIL, opencv, xxhash):
  python3 gen_whole_request.py --in DIR --out DIR
where DIR (in) holds tokenizer.json, tokenizer_config.json, models/<family>/*.json,
templates/*.jinja and digests.json (each family's cohort contract digest, from the TS side).
"""
import argparse
import base64
import copy
import hashlib
import io
import json
import math
import os
import random
import sys
import traceback

import cv2
import numpy as np
import torch
import torchvision
import transformers
import xxhash
from PIL import Image
from torchvision.transforms import InterpolationMode

FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]
# The last added-token id of each family's tokenizer.json (Qwen2-VL: up to <|video_pad|>; Qwen2.5-VL:
# up to <|file_sep|>; Qwen3-VL: all of them, <think> included). Same vocabulary otherwise.
FAMILY_MAX_ADDED_ID = {"qwen2_vl": 151656, "qwen2_5_vl": 151664, "qwen3_vl": 10**9}
MODELS = {
    # model id -> (family, template file)
    "Qwen/Qwen2-VL-7B-Instruct": ("qwen2_vl", "qwen2vl"),
    "Qwen/Qwen2.5-VL-7B-Instruct": ("qwen2_5_vl", "qwen2vl"),
    "Qwen/Qwen3-VL-8B-Instruct": ("qwen3_vl", "qwen3vl-instruct"),
    "Qwen/Qwen3-VL-8B-Thinking": ("qwen3_vl", "qwen3vl-thinking"),
}
IMAGE_PAD, VIDEO_PAD = 151655, 151656
BLOCK_SIZE = 16
LOCAL_HASH_SEED = 1337
MM_PAD_SHIFT_VALUE = 1_000_000  # schedule_batch.py L129 (sglang 9d147fd)

# ---------------------------------------------------------------------------------------------
# SGLang chat normalisation (python/sglang/srt/entrypoints/openai/serving_chat.py
# `_process_messages` / `_apply_jinja_template`, python/sglang/srt/parser/jinja_template_utils.py
# `process_content_for_template_format` L206-300, protocol.py message/tool models). Mirrored here.
# ---------------------------------------------------------------------------------------------

GENERIC_ROLES = {"system", "assistant", "tool", "function", "developer", "latest_reminder"}

# kvedge's one deliberate difference in normalisation (src/prompt/messages.ts TEMPLATE_ROLE): the
# edge renders the prompt the worker receives, and renders `developer` as `system` and `function` as
# `tool` (SGLang passes them on; the Qwen3-VL templates print neither).
TEMPLATE_ROLE = {"developer": "system", "function": "tool"}


def dump_tool(t):
    """protocol.py `Tool.model_dump()`: type, function{description,name,parameters,strict}, defer_loading."""
    fn = t["function"]
    return {
        "type": t.get("type", "function"),
        "function": {
            "description": fn.get("description"),
            "name": fn["name"],
            "parameters": fn.get("parameters"),
            "strict": fn.get("strict", False),
        },
        "defer_loading": t.get("defer_loading"),
    }


def dump_tool_call(c):
    """protocol.py `ToolCall.model_dump()`."""
    fn = c["function"]
    return {
        "id": c.get("id"),
        "index": c.get("index"),
        "type": "function",
        "function": {"name": fn.get("name"), "arguments": fn.get("arguments")},
    }


def message_dump(m):
    """pydantic dump of ChatCompletionMessageUserParam / ...GenericParam (known fields only)."""
    role = m["role"]
    if role == "user":
        return {"role": "user", "content": m.get("content")}
    out = {"role": TEMPLATE_ROLE.get(role.lower(), role.lower()), "content": m.get("content")}
    for k in ("name", "tool_call_id", "reasoning_content"):
        out[k] = m.get(k)
    out["tool_calls"] = [dump_tool_call(c) for c in m["tool_calls"]] if m.get("tool_calls") else None
    out["tools"] = [dump_tool(t) for t in m["tools"]] if m.get("tools") else None
    return out


def normalize_tool_content(msg):
    """serving_chat.py `normalize_tool_content`: a tool message made only of text parts -> one string."""
    c = msg.get("content")
    if msg.get("role") == "tool" and isinstance(c, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in c):
        msg["content"] = " ".join(p.get("text", "") for p in c)
    return msg


def process_content(msg, image_data, video_data):
    """jinja_template_utils.py `process_content_for_template_format`, content format 'openai'."""
    if not isinstance(msg.get("content"), list):
        return {k: v for k, v in msg.items() if v is not None}
    parts = []
    for chunk in msg["content"]:
        if not isinstance(chunk, dict):
            continue
        t = chunk.get("type")
        if t in ("image_url", "input_image"):
            obj = chunk.get("image_url") or {}
            if isinstance(obj, str):
                obj = {"url": obj}
            image_data.append(obj["url"])
            parts.append({"type": "image"})
        elif t == "video_url":
            video_data.append(chunk["video_url"]["url"])
            parts.append({"type": "video"})
        elif t in ("text", "input_text"):
            parts.append({"type": "text", "text": chunk["text"]})
    new = {k: v for k, v in msg.items() if v is not None and k != "content"}
    new["content"] = parts
    return new


def sglang_chat(request):
    """Messages, tools, template kwargs, assistant prefix and media URLs as SGLang prepares them."""
    image_data, video_data = [], []
    msgs = []
    for m in request["messages"]:
        d = message_dump(m)
        if d["content"] is None:
            d["content"] = ""
        d = process_content(d, image_data, video_data)
        if d["role"] == "tool":
            d = normalize_tool_content(d)
        if d["role"] == "assistant" and isinstance(d.get("tool_calls"), list):
            for item in d["tool_calls"]:
                if isinstance(item["function"].get("arguments"), str):
                    item["function"]["arguments"] = json.loads(item["function"]["arguments"])
        msgs.append(d)
    prefix = None
    if msgs and msgs[-1]["role"] == "assistant" and isinstance(msgs[-1]["content"], str):
        if request.get("continue_final_message"):
            prefix = msgs[-1]["content"]
            msgs = msgs[:-1]
        else:
            # protocol.py: a trailing assistant message is re-labelled as a user message.
            msgs[-1] = {"role": "user", "content": msgs[-1]["content"]}
    tools = None
    req_tools = request.get("tools")
    choice = request.get("tool_choice", "auto" if req_tools else "none")
    if req_tools and choice != "none":
        if isinstance(choice, str):
            tools = [dump_tool(t) for t in req_tools]
        else:
            tools = [dump_tool(t) for t in req_tools if t["function"]["name"] == choice["function"]["name"]]
    kwargs = dict(request.get("chat_template_kwargs") or {})
    effort = request.get("reasoning_effort")
    if effort is not None:
        # protocol.py normalize_reasoning_inputs (setdefault: explicit kwargs win).
        kwargs.setdefault("thinking", effort != "none")
        kwargs.setdefault("enable_thinking", effort != "none")
    return msgs, tools, kwargs, effort, prefix, image_data, video_data


# ---------------------------------------------------------------------------------------------
# SGLang video preprocessing (python/sglang/srt/multimodal/processors/qwen_vl.py at 9d147fd:
# constants L41-60, smart_resize L80-110, *_by_factor L113-125, smart_nframes L128-173,
# preprocess_video L177-256). Mirrored here.
# ---------------------------------------------------------------------------------------------
IMAGE_FACTOR = 28
VIDEO_TOTAL_PIXELS = int(float(128000 * 28 * 28 * 0.9))
VIDEO_MIN_PIXELS = 128 * 28 * 28
VIDEO_MAX_PIXELS = 768 * 28 * 28
FRAME_FACTOR = 2
FPS = 2.0
FPS_MIN_FRAMES = 4
FPS_MAX_FRAMES = 768
MAX_RATIO = 200


def round_by_factor(n, f):
    return round(n / f) * f


def ceil_by_factor(n, f):
    return math.ceil(n / f) * f


def floor_by_factor(n, f):
    return math.floor(n / f) * f


def sg_smart_resize(h, w, factor=IMAGE_FACTOR, min_pixels=4 * 28 * 28, max_pixels=16384 * 28 * 28):
    if max(h, w) / min(h, w) > MAX_RATIO:
        raise ValueError("absolute aspect ratio must be smaller than 200")
    hb = max(factor, round_by_factor(h, factor))
    wb = max(factor, round_by_factor(w, factor))
    if hb * wb > max_pixels:
        beta = math.sqrt((h * w) / max_pixels)
        hb = floor_by_factor(h / beta, factor)
        wb = floor_by_factor(w / beta, factor)
    elif hb * wb < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        hb = ceil_by_factor(h * beta, factor)
        wb = ceil_by_factor(w * beta, factor)
    return hb, wb


def smart_nframes(total_frames, video_fps):
    fps = FPS
    min_frames = ceil_by_factor(FPS_MIN_FRAMES, FRAME_FACTOR)
    max_frames = floor_by_factor(min(FPS_MAX_FRAMES, total_frames), FRAME_FACTOR)
    n = total_frames / video_fps * fps
    n = min(min(max(n, min_frames), max_frames), total_frames)
    n = floor_by_factor(n, FRAME_FACTOR)
    if not (FRAME_FACTOR <= n <= total_frames):
        raise ValueError(f"nframes should in interval [{FRAME_FACTOR}, {total_frames}], but got {n}.")
    return n


def sglang_preprocess_video(frames_thwc, avg_fps):
    """frames: all decoded frames (T,H,W,C uint8 RGB); returns (T',C,H',W') float tensor + metadata."""
    total = len(frames_thwc)
    n = smart_nframes(total, avg_fps)
    idx = np.unique(np.linspace(0, total - 1, n, dtype=np.int64)).tolist()
    n = len(idx)
    video = torch.from_numpy(np.stack([frames_thwc[i] for i in idx])).permute(0, 3, 1, 2)
    _, _, height, width = video.shape
    min_pixels = VIDEO_MIN_PIXELS
    max_pixels = max(min(VIDEO_MAX_PIXELS, VIDEO_TOTAL_PIXELS / n * FRAME_FACTOR), int(min_pixels * 1.05))
    rh, rw = sg_smart_resize(height, width, IMAGE_FACTOR, min_pixels, max_pixels)
    video = torchvision.transforms.functional.resize(video, [rh, rw], interpolation=InterpolationMode.BILINEAR, antialias=True).float()
    meta = {"fps": avg_fps, "duration": total / avg_fps, "total_num_frames": total, "frames_indices": idx, "video_backend": "torchcodec"}
    return video, meta, {"nframes": n, "indices": idx, "sglang_resized_hw": [rh, rw]}


# ---------------------------------------------------------------------------------------------
# kvedge identity and block hashes (independent Python implementation).
# ---------------------------------------------------------------------------------------------


def lp(b):
    return len(b).to_bytes(8, "little") + b


def field(tag, b):
    return bytes([tag]) + lp(b)


def u64(v):
    return int(v).to_bytes(8, "little")


def content_digest(raw):
    return hashlib.sha256(raw).hexdigest()


def mm_identity(modality, content_hash_hex, meta, digest):
    rec = lp(b"kvedge/mm-identity/v2") + field(1, modality.encode()) + field(2, bytes.fromhex(content_hash_hex))
    rec += field(3, u64(meta["width"])) + field(4, u64(meta["height"]))
    if modality == "video":
        rec += field(5, u64(meta["totalFrames"])) + field(6, np.float64(meta["avgFps"]).tobytes())
    rec += field(7, digest.encode())
    return hashlib.sha256(rec).digest()[:8].hex()


def block_hashes(ids):
    out = []
    for k in range(len(ids) // BLOCK_SIZE):
        blk = np.asarray(ids[k * BLOCK_SIZE:(k + 1) * BLOCK_SIZE], dtype="<u4").tobytes()
        out.append(str(xxhash.xxh3_64_intdigest(blk, seed=LOCAL_HASH_SEED)))
    return out


# ---------------------------------------------------------------------------------------------
# Media, made deterministically.
# ---------------------------------------------------------------------------------------------


def pattern(w, h, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = rng.integers(0, 255, 3)
    img = np.empty((h, w, 3), dtype=np.uint8)
    img[..., 0] = (base[0] + x * 255 // max(1, w - 1)) % 256
    img[..., 1] = (base[1] + y * 255 // max(1, h - 1)) % 256
    img[..., 2] = (base[2] + ((x // 16 + y // 16) % 2) * 90) % 256
    return img


def flat(w, h, seed):
    """Cheap to compress (huge images stay small on disk)."""
    rng = np.random.default_rng(seed)
    img = np.empty((h, w, 3), dtype=np.uint8)
    img[...] = rng.integers(0, 255, 3).astype(np.uint8)
    img[:: max(1, h // 7), :, :] = 255
    return img


def make_image(spec, path):
    w, h, fmt, seed = spec["w"], spec["h"], spec["fmt"], spec["seed"]
    arr = flat(w, h, seed) if w * h > 4_000_000 else pattern(w, h, seed)
    im = Image.fromarray(arr, "RGB")
    if spec.get("mode") == "L":
        im = im.convert("L")
    elif spec.get("mode") == "RGBA":
        im = im.convert("RGBA")
    if fmt == "png":
        im.save(path, "PNG", optimize=False, compress_level=9)
    elif fmt == "jpeg":
        kw = {"quality": 85}
        if spec.get("exif"):
            ex = Image.Exif()
            ex[0x0112] = spec["exif"]
            kw["exif"] = ex.tobytes()
        if spec.get("progressive"):
            kw["progressive"] = True
        im.save(path, "JPEG", **kw)
    elif fmt == "webp":
        im.save(path, "WEBP", lossless=spec.get("lossless", False), quality=80, method=4)
    elif fmt == "gif":
        im.convert("P", palette=Image.ADAPTIVE, colors=32).save(path, "GIF")
    elif fmt == "bmp":
        im.save(path, "BMP")
    else:
        raise ValueError(fmt)


def make_video(spec, path):
    w, h, n, fps, seed = spec["w"], spec["h"], spec["frames"], spec["fps"], spec["seed"]
    vw = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"MJPG"), fps, (w, h))
    if not vw.isOpened():
        raise RuntimeError("VideoWriter did not open")
    base = pattern(w, h, seed)
    for i in range(n):
        f = base.copy()
        s = max(2, min(w, h) // 4)
        x0 = (i * 7) % max(1, w - s)
        y0 = (i * 5) % max(1, h - s)
        f[y0:y0 + s, x0:x0 + s] = (255 - (i * 13) % 256, (i * 29) % 256, 40)
        vw.write(cv2.cvtColor(f, cv2.COLOR_RGB2BGR))
    vw.release()


def avi_time_base(raw):
    """(dwScale, dwRate) of the AVI's video stream header: FFmpeg's stream time base is scale/rate."""
    i = 0
    while True:
        i = raw.index(b"strh", i)
        data = raw[i + 8:]
        if data[:4] == b"vids":
            return int.from_bytes(data[20:24], "little"), int.from_bytes(data[24:28], "little")
        i += 4


def torchcodec_avg_fps(n, scale, rate):
    """torchcodec exact mode: frames / pts span in seconds; every frame lasts one tick of scale/rate."""
    return n / (n * (scale / rate))


def read_video(path):
    cap = cv2.VideoCapture(path)
    fps = cap.get(cv2.CAP_PROP_FPS)
    frames = []
    while True:
        ok, f = cap.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(f, cv2.COLOR_BGR2RGB))
    cap.release()
    return frames, fps


# ---------------------------------------------------------------------------------------------
# Cases.
# ---------------------------------------------------------------------------------------------

TEXTS = [
    "Describe this in one sentence.",
    "What is shown here? Be precise about colours and shapes.",
    "Compare them.",
    "Wie viele Objekte sind zu sehen? Antworte kurz.",
    "これは何ですか？詳しく説明してください。",
    "Résumé: ça, c’est très « intéressant » — non? 🎉🚀",
    "  leading and trailing spaces  \n\nand blank lines\n",
    "Count the frames where the square moves left.",
    "中文测试：请描述视频内容，并给出时间点。",
    "Emoji mix 👩‍👩‍👧‍👦 🏳️‍🌈 and combining é vs é",
]

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "search", "description": "Web search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "top_k": {"type": "integer", "minimum": 1}}}}},
]


def build_cases(rng):
    images = {}
    videos = {}
    cases = []

    def img(name, **spec):
        spec.setdefault("seed", len(images) + 1)
        images[name] = spec
        return name

    def vid(name, **spec):
        spec.setdefault("seed", 1000 + len(videos))
        videos[name] = spec
        return name

    # Images: sizes, formats, EXIF orientation, tiny, huge, extreme aspect.
    img_names = [
        img("png_640x480", w=640, h=480, fmt="png"),
        img("png_1920x1080", w=1920, h=1080, fmt="png"),
        img("png_300x200", w=300, h=200, fmt="png"),
        img("png_rgba_333x517", w=333, h=517, fmt="png", mode="RGBA"),
        img("png_gray_1000x750", w=1000, h=750, fmt="png", mode="L"),
        img("jpeg_800x600", w=800, h=600, fmt="jpeg"),
        img("jpeg_exif6_1200x900", w=1200, h=900, fmt="jpeg", exif=6),
        img("jpeg_exif8_400x1000", w=400, h=1000, fmt="jpeg", exif=8),
        img("jpeg_exif3_777x555", w=777, h=555, fmt="jpeg", exif=3),
        img("jpeg_progressive_1024x768", w=1024, h=768, fmt="jpeg", progressive=True),
        img("webp_512x512", w=512, h=512, fmt="webp"),
        img("webp_lossless_250x900", w=250, h=900, fmt="webp", lossless=True),
        img("gif_320x240", w=320, h=240, fmt="gif"),
        img("gif_57x91", w=57, h=91, fmt="gif"),
        img("bmp_123x45", w=123, h=45, fmt="bmp"),
        img("tiny_1x1", w=1, h=1, fmt="png"),
        img("tiny_5x7", w=5, h=7, fmt="png"),
        img("tiny_28x28", w=28, h=28, fmt="png"),
        img("small_56x30", w=56, h=30, fmt="jpeg"),
        img("huge_4000x3000", w=4000, h=3000, fmt="png"),
        img("huge_5000x2800", w=5000, h=2800, fmt="jpeg"),
        img("aspect_2000x20", w=2000, h=20, fmt="png"),
        img("aspect_30x2800", w=30, h=2800, fmt="png"),
        img("aspect_1500x10", w=1500, h=10, fmt="png"),
        img("odd_1001x999", w=1001, h=999, fmt="png"),
        img("half_70x126", w=70, h=126, fmt="png"),
    ]
    for k in range(14):
        w = int(rng.choice([rng.randint(29, 400), rng.randint(400, 1600), rng.randint(1600, 3000)]))
        h = int(rng.choice([rng.randint(29, 400), rng.randint(400, 1600)]))
        img_names.append(img(f"rand{k}_{w}x{h}", w=w, h=h, fmt=rng.choice(["png", "jpeg", "webp"])))
    # Rejected by the worker (aspect ratio > 200): the edge must not route these exactly.
    reject_names = [img("reject_aspect_1210x6", w=1210, h=6, fmt="png"), img("reject_aspect_4x900", w=4, h=900, fmt="png")]

    vid_names = [
        vid("v_320x240_10f_10fps", w=320, h=240, frames=10, fps=10),
        vid("v_320x240_2f_10fps", w=320, h=240, frames=2, fps=10),
        vid("v_160x120_3f_1fps", w=160, h=120, frames=3, fps=1),
        vid("v_640x360_48f_24fps", w=640, h=360, frames=48, fps=24),
        vid("v_640x360_30f_30fps", w=640, h=360, frames=30, fps=30),
        vid("v_1280x720_12f_25fps", w=1280, h=720, frames=12, fps=25),
        vid("v_1280x720_61f_2fps", w=1280, h=720, frames=61, fps=2),
        vid("v_64x48_8f_5fps", w=64, h=48, frames=8, fps=5),
        vid("v_200x600_20f_15fps", w=200, h=600, frames=20, fps=15),
        vid("v_480x270_90f_30fps", w=480, h=270, frames=90, fps=30),
        vid("v_352x288_25f_12.5fps", w=352, h=288, frames=25, fps=12.5),
        vid("v_720x480_40f_29.97fps", w=720, h=480, frames=40, fps=30000 / 1001),
        vid("v_96x96_5f_60fps", w=96, h=96, frames=5, fps=60),
        vid("v_1920x1080_6f_6fps", w=1920, h=1080, frames=6, fps=6),
        vid("v_416x240_33f_8fps", w=416, h=240, frames=33, fps=8),
    ]
    # Single-frame clip: the worker raises (nframes < 2); the edge must not route it exactly.
    reject_vids = [vid("v_320x240_1f_10fps", w=320, h=240, frames=1, fps=10)]
    vid("v_64x48_300f_60fps", w=64, h=48, frames=300, fps=60)
    vid("v_128x72_200f_25fps", w=128, h=72, frames=200, fps=25)
    # After SGLang's factor-28 resize one side is 28 (< 32): the Qwen3-VL video resize branch of the
    # worker's transformers is not pinned by the contract (smallSidePolicy unknown).
    vid("v_3000x20_8f_4fps", w=3000, h=20, frames=8, fps=4)
    for k in range(8):
        img(f"many{k}_{40 + 13 * k}x{90 - 5 * k}", w=40 + 13 * k, h=90 - 5 * k, fmt="png")

    def image_part(name):
        return {"type": "image_url", "image_url": {"url": f"@image:{name}"}}

    def video_part(name):
        return {"type": "video_url", "video_url": {"url": f"https://media.example.com/golden/{name}.avi"}}

    fam_models = {
        "qwen2_vl": ["Qwen/Qwen2-VL-7B-Instruct"],
        "qwen2_5_vl": ["Qwen/Qwen2.5-VL-7B-Instruct"],
        "qwen3_vl": ["Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3-VL-8B-Thinking"],
    }

    def add(fam, tag, request, expect="exact", edge_reason=None):
        c = {"id": f"{fam}/{tag}", "family": fam, "request": request, "expect": expect}
        if edge_reason:
            c["edge_reason"] = edge_reason
        cases.append(c)

    for fam in FAMILIES:
        models = fam_models[fam]
        m0 = models[0]
        mt = models[-1]
        # --- text ---
        add(fam, "text/simple", {"model": m0, "messages": [{"role": "user", "content": "Hello! How are you?"}]})
        add(fam, "text/system", {"model": m0, "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": TEXTS[1]}]})
        add(fam, "text/multi-turn", {"model": m0, "messages": [
            {"role": "system", "content": "Be helpful."},
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4."},
            {"role": "user", "content": [{"type": "text", "text": "And 3+3?"}, {"type": "text", "text": "Explain."}]},
            {"role": "assistant", "content": "6, because 3+3=6."},
            {"role": "user", "content": "Thanks. Now multiply them."}]})
        add(fam, "text/unicode", {"model": m0, "messages": [{"role": "user", "content": " | ".join(TEXTS[3:7] + TEXTS[8:])}]})
        add(fam, "text/tools", {"model": m0, "tools": TOOLS, "messages": [{"role": "user", "content": "Weather in Paris and search for croissants."}]})
        add(fam, "text/tool-calls", {"model": m0, "tools": TOOLS, "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "18C"}, {"type": "text", "text": "sunny"}]},
            {"role": "user", "content": "And tomorrow?"}]})
        add(fam, "text/tool-choice-named", {"model": m0, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "search"}}, "messages": [{"role": "user", "content": "Find news."}]})
        add(fam, "text/continue-final", {"model": m0, "continue_final_message": True, "messages": [{"role": "user", "content": "Write a haiku."}, {"role": "assistant", "content": "Autumn moonlight—"}]})
        add(fam, "text/thinking", {"model": mt, "messages": [{"role": "user", "content": "Think step by step: 17*23?"}, {"role": "assistant", "content": "391", "reasoning_content": "17*23 = 17*20 + 17*3 = 340 + 51"}, {"role": "user", "content": "And 18*23?"}], "chat_template_kwargs": {"enable_thinking": True}})
        add(fam, "text/reasoning-effort", {"model": mt, "reasoning_effort": "low", "messages": [{"role": "user", "content": "Why is the sky blue?"}]})
        # --- images ---
        for k, name in enumerate(img_names):
            model = models[k % len(models)]
            text = TEXTS[k % len(TEXTS)]
            content = [image_part(name), {"type": "text", "text": text}] if k % 3 else [{"type": "text", "text": text}, image_part(name)]
            msgs = [{"role": "user", "content": content}]
            if k % 5 == 0:
                msgs.insert(0, {"role": "system", "content": "Look carefully."})
            add(fam, f"image/{name}", {"model": model, "messages": msgs})
        # several images, several turns, add_vision_id
        add(fam, "images/three", {"model": m0, "messages": [{"role": "user", "content": [image_part("png_640x480"), image_part("jpeg_800x600"), image_part("webp_512x512"), {"type": "text", "text": TEXTS[2]}]}]})
        add(fam, "images/multi-turn", {"model": models[-1], "messages": [
            {"role": "user", "content": [image_part("png_300x200"), {"type": "text", "text": "What is this?"}]},
            {"role": "assistant", "content": "A gradient."},
            {"role": "user", "content": [{"type": "text", "text": "And this one?"}, image_part("gif_320x240")]}]})
        add(fam, "images/vision-id", {"model": m0, "chat_template_kwargs": {"add_vision_id": True}, "messages": [{"role": "user", "content": [image_part("png_1920x1080"), image_part("jpeg_exif6_1200x900"), {"type": "text", "text": TEXTS[2]}]}]})
        add(fam, "images/same-twice", {"model": m0, "messages": [{"role": "user", "content": [image_part("odd_1001x999"), {"type": "text", "text": "and again"}, image_part("odd_1001x999")]}]})
        for name in reject_names:
            add(fam, f"reject/{name}", {"model": m0, "messages": [{"role": "user", "content": [image_part(name), {"type": "text", "text": "?"}]}]}, expect="fallback")
        # --- videos ---
        for k, name in enumerate(vid_names):
            model = models[k % len(models)]
            text = TEXTS[(k + 7) % len(TEXTS)]
            content = [video_part(name), {"type": "text", "text": text}] if k % 2 == 0 else [{"type": "text", "text": text}, video_part(name)]
            add(fam, f"video/{name}", {"model": model, "messages": [{"role": "user", "content": content}]})
        for name in reject_vids:
            add(fam, f"reject/{name}", {"model": m0, "messages": [{"role": "user", "content": [video_part(name), {"type": "text", "text": "?"}]}]}, expect="fallback")
        # --- image + video ---
        add(fam, "mixed/video-then-image", {"model": m0, "messages": [{"role": "user", "content": [video_part("v_320x240_10f_10fps"), {"type": "text", "text": "and"}, image_part("png_640x480"), {"type": "text", "text": TEXTS[2]}]}]})
        add(fam, "mixed/image-video-image", {"model": models[-1], "messages": [{"role": "user", "content": [image_part("jpeg_800x600"), video_part("v_640x360_48f_24fps"), {"type": "text", "text": "then"}, image_part("gif_57x91"), {"type": "text", "text": TEXTS[0]}]}]})
        add(fam, "mixed/two-videos-two-turns", {"model": m0, "messages": [
            {"role": "user", "content": [video_part("v_1280x720_12f_25fps"), {"type": "text", "text": "First clip?"}]},
            {"role": "assistant", "content": "A moving square."},
            {"role": "user", "content": [image_part("webp_512x512"), video_part("v_200x600_20f_15fps"), {"type": "text", "text": "Same square?"}]}]})
        add(fam, "mixed/system-tools-media", {"model": m0, "tools": TOOLS[:1], "messages": [
            {"role": "system", "content": "Use tools if needed."},
            {"role": "user", "content": [image_part("png_rgba_333x517"), video_part("v_64x48_8f_5fps"), {"type": "text", "text": "Where was this filmed? Check the weather there."}]}]})
        add(fam, "mixed/vision-id", {"model": m0, "chat_template_kwargs": {"add_vision_id": True}, "messages": [{"role": "user", "content": [image_part("tiny_28x28"), video_part("v_480x270_90f_30fps"), image_part("half_70x126"), {"type": "text", "text": TEXTS[2]}]}]})
        # --- more request shapes (added after the first run) ---
        num_tools = [{"type": "function", "function": {"name": "set_level", "description": "Set a level", "parameters": {"type": "object", "properties": {"level": {"type": "number", "minimum": 0.0, "maximum": 1e3, "default": 0.5}, "steps": {"type": "integer", "default": 10}}, "required": ["level"]}}}]
        add(fam, "extra/tools-float-params", {"model": m0, "tools": num_tools, "messages": [{"role": "user", "content": "Set the level to half."}]})
        add(fam, "extra/tool-call-float-args", {"model": m0, "tools": num_tools, "messages": [
            {"role": "user", "content": "Set it."},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "set_level", "arguments": "{\"level\": 1.0, \"big\": 1e20, \"neg\": -0.0, \"tiny\": 1.5e-7, \"n\": 12345678901234567890}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "tool", "tool_call_id": "c1", "content": "still ok"},
            {"role": "user", "content": "Thanks."}]})
        add(fam, "extra/developer-and-names", {"model": m0, "messages": [
            {"role": "developer", "content": "Answer in French."},
            {"role": "user", "content": "Hi", "name": "alice"},
            {"role": "assistant", "content": "Bonjour", "name": "bot"},
            {"role": "user", "content": "Why?"}]})
        add(fam, "extra/empty-and-whitespace", {"model": m0, "messages": [
            {"role": "system", "content": ""},
            {"role": "user", "content": "\n\n  \t"},
            {"role": "assistant", "content": "   "},
            {"role": "user", "content": "\u00a0\u2028\u200b\u200d end"}]})
        add(fam, "extra/scripts", {"model": m0, "messages": [{"role": "user", "content": "مرحبا بالعالم — नमस्ते दुनिया — สวัสดีชาวโลก — Γειά σου — Привет — 안녕하세요 — 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 — ﷽ — e\u0301\u0301"}]})
        add(fam, "extra/special-token-text", {"model": m0, "messages": [{"role": "user", "content": [image_part("png_640x480"), {"type": "text", "text": "What do <|vision_start|> and <|im_end|> mean?"}]}]})
        add(fam, "extra/literal-image-pad", {"model": m0, "messages": [{"role": "user", "content": [image_part("png_640x480"), {"type": "text", "text": "Is <|image_pad|> a token?"}]}]}, expect="fallback")
        add(fam, "extra/thinking-history", {"model": mt, "messages": [
            {"role": "user", "content": [image_part("jpeg_800x600"), {"type": "text", "text": "What is it?"}]},
            {"role": "assistant", "content": "<think>\nLooks like a gradient.\n</think>\n\nA gradient."},
            {"role": "user", "content": "Sure?"},
            {"role": "assistant", "content": "Yes.", "reasoning_content": "  checked twice  "},
            {"role": "user", "content": [{"type": "text", "text": "And this?"}, video_part("v_96x96_5f_60fps")]}]})
        add(fam, "extra/reasoning-none", {"model": mt, "reasoning_effort": "none", "messages": [{"role": "user", "content": "Quick: capital of Peru?"}]})
        add(fam, "extra/many-images", {"model": m0, "messages": [{"role": "user", "content": [image_part(f"many{k}_{40 + 13 * k}x{90 - 5 * k}") for k in range(8)] + [{"type": "text", "text": "How many?"}]}]})
        add(fam, "extra/long-video-60fps", {"model": m0, "messages": [{"role": "user", "content": [video_part("v_64x48_300f_60fps"), {"type": "text", "text": "Describe."}]}]})
        add(fam, "extra/video-200f", {"model": mt, "messages": [{"role": "user", "content": [{"type": "text", "text": "Describe."}, video_part("v_128x72_200f_25fps")]}]})
        add(fam, "extra/vision-id-videos", {"model": m0, "chat_template_kwargs": {"add_vision_id": True}, "messages": [{"role": "user", "content": [video_part("v_416x240_33f_8fps"), {"type": "text", "text": "vs"}, video_part("v_160x120_3f_1fps")]}]})
        add(fam, "extra/adjacent-videos", {"model": m0, "messages": [{"role": "user", "content": [video_part("v_416x240_33f_8fps"), video_part("v_160x120_3f_1fps"), {"type": "text", "text": "Same?"}]}]}, edge_reason="adjacent_videos")
        if fam == "qwen3_vl":
            add(fam, "extra/thin-video", {"model": m0, "messages": [{"role": "user", "content": [video_part("v_3000x20_8f_4fps"), {"type": "text", "text": "?"}]}]}, edge_reason="unpredictable_geometry")
        else:
            add(fam, "extra/thin-video", {"model": m0, "messages": [{"role": "user", "content": [video_part("v_3000x20_8f_4fps"), {"type": "text", "text": "?"}]}]})
    return images, videos, cases


# ---------------------------------------------------------------------------------------------
# Upstream run.
# ---------------------------------------------------------------------------------------------


def family_model_dir(inp, fam, work):
    d = os.path.join(work, fam)
    os.makedirs(d, exist_ok=True)
    for f in ("config.json", "preprocessor_config.json", "video_preprocessor_config.json"):
        with open(os.path.join(inp, "models", fam, f)) as src, open(os.path.join(d, f), "w") as dst:
            dst.write(src.read())
    tok = json.load(open(os.path.join(inp, "tokenizer.json"), encoding="utf-8"))
    tok["added_tokens"] = [t for t in tok["added_tokens"] if t["id"] <= FAMILY_MAX_ADDED_ID[fam]]
    json.dump(tok, open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8"), ensure_ascii=False)
    cfg = json.load(open(os.path.join(inp, "tokenizer_config.json"), encoding="utf-8"))
    cfg["added_tokens_decoder"] = {k: v for k, v in cfg.get("added_tokens_decoder", {}).items() if int(k) <= FAMILY_MAX_ADDED_ID[fam]}
    cfg.pop("chat_template", None)
    cfg["tokenizer_class"] = "Qwen2Tokenizer"
    json.dump(cfg, open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8"), ensure_ascii=False)
    return d


def data_url(path, fmt):
    mime = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp", "gif": "image/gif", "bmp": "image/bmp"}[fmt]
    return f"data:{mime};base64," + base64.b64encode(open(path, "rb").read()).decode()


def as_ids(x):
    if isinstance(x, dict) or hasattr(x, "keys"):
        x = x["input_ids"]
    if hasattr(x, "tolist"):
        x = x.tolist()
    if x and isinstance(x[0], list):
        x = x[0]
    return [int(t) for t in x]


def runs_of(ids, token):
    out = []
    i = 0
    n = len(ids)
    while i < n:
        if ids[i] == token:
            j = i
            while j + 1 < n and ids[j + 1] == token:
                j += 1
            out.append([i, j + 1])
            i = j + 1
        else:
            i += 1
    return out


def run_case(case, ctx):
    """The worker's ids for one case; for `expect: fallback` the worker must raise (its error is recorded)."""
    if case["expect"] != "fallback":
        return worker_ids(case, ctx)
    try:
        worker_ids(case, ctx)
    except Exception as e:  # noqa: BLE001
        out = {k: case[k] for k in ("id", "family", "expect", "request")}
        out["model"] = case["request"]["model"]
        out["template"] = MODELS[out["model"]][1]
        out["worker_error"] = f"{type(e).__name__}: {e}"[:300]
        return out
    raise RuntimeError("expected the worker to reject this case")


def worker_ids(case, ctx):
    fam = case["family"]
    model_id = case["request"]["model"]
    family, template_id = MODELS[model_id]
    assert family == fam
    proc = ctx["processors"][fam]
    tok = proc.tokenizer
    template = ctx["templates"][template_id]
    # The request exactly as a client sends it (image URLs resolved to data: URLs).
    request = json.loads(json.dumps(case["request"]), object_hook=lambda o: o)

    def resolve(o):
        if isinstance(o, dict):
            return {k: resolve(v) for k, v in o.items()}
        if isinstance(o, list):
            return [resolve(v) for v in o]
        if isinstance(o, str) and o.startswith("@image:"):
            return ctx["image_urls"][o[7:]]
        return o

    request = resolve(request)
    msgs, tools, kwargs, effort, prefix, image_urls, video_urls = sglang_chat(copy.deepcopy(request))
    ids = as_ids(tok.apply_chat_template(msgs, tools=tools, chat_template=template, add_generation_prompt=True, tokenize=True, return_dict=False, reasoning_effort=effort, **kwargs))
    rendered = tok.apply_chat_template(msgs, tools=tools, chat_template=template, add_generation_prompt=True, tokenize=False, reasoning_effort=effort, **kwargs)
    if prefix:
        ids += tok.encode(prefix, add_special_tokens=False)
        rendered += prefix
    prompt = tok.decode(ids)
    out = {"id": case["id"], "family": fam, "model": model_id, "template": template_id, "expect": case["expect"], "request": request, "rendered": rendered}
    if case.get("edge_reason"):
        out["edge_reason"] = case["edge_reason"]
    items = []  # prompt order
    images, videos, vmeta = [], [], []
    for u in image_urls:
        name = ctx["url_to_image"][u]
        path = ctx["image_paths"][name]
        raw = open(path, "rb").read()
        im = Image.open(io.BytesIO(raw))  # SGLang load_image: Image.open, no EXIF transpose
        im.load()
        meta = {"width": im.size[0], "height": im.size[1]}
        images.append(im)
        items.append({"modality": "image", "media": name, "contentHash": content_digest(raw), "meta": meta})
    for u in video_urls:
        name = u.rsplit("/", 1)[1][:-4]
        v = ctx["videos"][name]
        items.append({"modality": "video", "media": name, "contentHash": v["contentHash"], "meta": v["probe"]})
    digest = ctx["digests"][fam]
    for it in items:
        it["mmHash"] = mm_identity(it["modality"], it["contentHash"], it["meta"], digest)
    sg_video_info = []
    for u in video_urls:
        v = ctx["videos"][u.rsplit("/", 1)[1][:-4]]
        t, meta, info = sglang_preprocess_video(v["frames"], v["probe"]["avgFps"])
        videos.append(t)
        vmeta.append(meta)
        sg_video_info.append(info)
    if not images and not videos:
        final = as_ids(tok.encode(prompt))
        out.update({"input_ids": final, "items": [], "mm_hashes": [], "block_hashes": block_hashes(final), "template_ids_len": len(ids)})
        return out
    call = {"text": [prompt], "return_tensors": "pt"}
    if images:
        call["images"] = images
    if videos:
        call["videos"] = videos
        if fam == "qwen3_vl":
            call["video_metadata"] = vmeta
            call["do_sample_frames"] = False
    res = proc(**call)
    expanded = as_ids(res["input_ids"])
    image_grid = res["image_grid_thw"].tolist() if images else []
    video_grid = res["video_grid_thw"].tolist() if videos else []
    img_runs = runs_of(expanded, IMAGE_PAD)
    vid_runs = runs_of(expanded, VIDEO_PAD)
    if len(img_runs) != len(images):
        raise RuntimeError(f"{len(img_runs)} image runs for {len(images)} images")
    # Items in SGLang order: images (prompt order) then videos (prompt order).
    img_items = [it for it in items if it["modality"] == "image"]
    vid_items = [it for it in items if it["modality"] == "video"]
    final = list(expanded)
    for k, it in enumerate(img_items):
        it["grid_thw"] = image_grid[k]
        it["runs"] = [img_runs[k]]
    r = 0
    for k, it in enumerate(vid_items):
        groups = int(video_grid[k][0]) if fam == "qwen3_vl" else 1
        it["grid_thw"] = video_grid[k]
        it["sglang"] = sg_video_info[k]
        it["runs"] = vid_runs[r:r + groups]
        r += groups
    if r != len(vid_runs):
        raise RuntimeError(f"{len(vid_runs)} video runs, {r} expected")
    mm_hashes = [it["mmHash"] for it in img_items + vid_items]
    for it in img_items + vid_items:
        pad = MM_PAD_SHIFT_VALUE + int(it["mmHash"], 16) % (1 << 30)
        it["padValue"] = pad
        for s, e in it["runs"]:
            for i in range(s, e):
                final[i] = pad
    out.update({"input_ids": final, "items": items, "mm_hashes": mm_hashes, "block_hashes": block_hashes(final), "template_ids_len": len(ids)})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="inp", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--limit", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))
    os.makedirs(os.path.join(a.out, "media"), exist_ok=True)
    work = os.path.join(a.out, "_models")
    rng = random.Random(20261202)
    images, videos, cases = build_cases(rng)
    if a.limit:
        cases = cases[: a.limit]
    ctx = {"templates": {}, "processors": {}, "image_urls": {}, "url_to_image": {}, "image_paths": {}, "videos": {}, "image_check": {}}
    for t in ("qwen2vl", "qwen3vl-instruct", "qwen3vl-thinking"):
        ctx["templates"][t] = open(os.path.join(a.inp, "templates", f"{t}.jinja"), encoding="utf-8").read()
    ctx["digests"] = json.load(open(os.path.join(a.inp, "digests.json")))
    for fam in FAMILIES:
        d = family_model_dir(a.inp, fam, work)
        p = transformers.AutoProcessor.from_pretrained(d)
        ctx["processors"][fam] = p
        print(fam, type(p).__name__, type(p.image_processor).__name__, type(p.video_processor).__name__, type(p.tokenizer).__name__, flush=True)
        ctx["image_check"][fam] = lambda im, p=p: p.image_processor(images=[im], return_tensors="pt")
    media_meta = {"images": {}, "videos": {}}
    for name, spec in images.items():
        path = os.path.join(a.out, "media", f"{name}.{ 'jpg' if spec['fmt'] == 'jpeg' else spec['fmt']}")
        make_image(spec, path)
        ctx["image_paths"][name] = path
        url = data_url(path, spec["fmt"])
        ctx["image_urls"][name] = url
        ctx["url_to_image"][url] = name
        im = Image.open(path)
        media_meta["images"][name] = {"file": os.path.basename(path), "spec": spec, "pil_size": list(im.size), "pil_format": im.format, "pil_mode": im.mode, "bytes": os.path.getsize(path)}
    for name, spec in videos.items():
        path = os.path.join(a.out, "media", f"{name}.avi")
        make_video(spec, path)
        frames, fps = read_video(path)
        raw = open(path, "rb").read()
        cap = cv2.VideoCapture(path)
        count_prop = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
        cap.release()
        if len(frames) != spec["frames"] or count_prop != spec["frames"]:
            raise RuntimeError(f"{name}: wrote {spec['frames']} frames, decoded {len(frames)}, CAP_PROP_FRAME_COUNT {count_prop}")
        h, w = frames[0].shape[:2]
        # SGLang takes fps from torchcodec (average_fps = frames / pts span), not from the header
        # rate OpenCV reports; they differ in the last bit for 2997/100 (29.97 vs 29.970000000000002).
        scale, rate = avi_time_base(raw)
        probe = {"totalFrames": len(frames), "avgFps": torchcodec_avg_fps(len(frames), scale, rate), "width": w, "height": h}
        ctx["videos"][name] = {"frames": frames, "probe": probe, "contentHash": content_digest(raw)}
        media_meta["videos"][name] = {"file": os.path.basename(path), "spec": spec, "probe": probe, "opencv_fps": fps, "time_base": [scale, rate], "contentHash": ctx["videos"][name]["contentHash"], "bytes": len(raw)}
    out_cases, failures = [], []
    for c in cases:
        try:
            out_cases.append(run_case(c, ctx))
        except Exception as e:  # noqa: BLE001
            failures.append({"id": c["id"], "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-2000:]})
            print("FAIL", c["id"], type(e).__name__, e, flush=True)
    # Requests reference images by name in the committed file (the data: URLs are rebuilt from the
    # media files by the test), so the golden stays small.
    for oc in out_cases:
        def unresolve(o):
            if isinstance(o, dict):
                return {k: unresolve(v) for k, v in o.items()}
            if isinstance(o, list):
                return [unresolve(v) for v in o]
            if isinstance(o, str) and o in ctx["url_to_image"]:
                return "@image:" + ctx["url_to_image"][o]
            return o
        oc["request"] = unresolve(oc["request"])
        # The body exactly as a (Python) client sends it: number lexemes matter (0.0 vs 0 in tools).
        oc["body"] = json.dumps(oc["request"], ensure_ascii=False)
    versions = {"python": sys.version.split()[0], "transformers": transformers.__version__, "torch": torch.__version__, "torchvision": torchvision.__version__, "PIL": Image.__version__, "opencv": cv2.__version__, "numpy": np.__version__, "xxhash": xxhash.VERSION}
    try:
        import tokenizers
        versions["tokenizers"] = tokenizers.__version__
    except Exception:  # noqa: BLE001
        pass
    golden = {"source": {"generator": "scripts/golden/gen_whole_request.py", "versions": versions, "block_size": BLOCK_SIZE, "digests": ctx["digests"], "sglang": "9d147fdca149119d14b288a9df587549d12505a6 (mirrored: chat normalisation, preprocess_video, pad_input_ids)"}, "media": media_meta, "cases": out_cases, "failures": failures}
    json.dump(golden, open(os.path.join(a.out, "whole_request.json"), "w", encoding="utf-8"), ensure_ascii=False, separators=(",", ":"))
    print(json.dumps({"cases": len(out_cases), "failures": len(failures), "versions": versions}), flush=True)


if __name__ == "__main__":
    main()
