#!/usr/bin/env python3
"""Golden answers of SGLang's own tool-call (qwen25) and reasoning (qwen3 / qwen3-thinking) parsers.

Writes test/fixtures/golden/sglang-parsers/cases.json (cases-current.json with --current-serving)
for test/unit/proxy/parsers-sglang-golden.test.ts:
generated model outputs (tool calls with integer-like keys, huge ints, floats, NaN/Infinity,
unicode and escapes, nested JSON, several calls, arrays of calls, unknown tools, broken and cut-off
markup, stray tags, thinking with and without </think>, <tool_call> inside the thinking, a late
<think>, whitespace), each run through SGLang's one-shot parse and its stream parse at several
chunkings.

The parsers are SGLang's modules themselves, imported from an SGLang source tree given on the
command line (SGLang is not vendored in this repository, and not installed: it pulls in torch):

  python/sglang/srt/parser/reasoning_parser.py           Qwen3Detector over BaseReasoningFormatDetector
  python/sglang/srt/function_call/qwen25_detector.py     Qwen25Detector
  python/sglang/srt/function_call/base_format_detector.py
  python/sglang/srt/function_call/core_types.py
  python/sglang/srt/function_call/utils.py               _partial_json_loads, _is_complete_json
  partial_json_parser (PyPI package; --pjp-src when it is not installed), orjson, pydantic

Stubbed, exactly these modules (a stub answers every name imported from it with an empty class):
  sglang.srt.entrypoints.openai.protocol   OpenAI pydantic models; the parsers read only
                                           tool.function.name of a Tool (passed here as plain
                                           objects) and name the rest in annotations
  sglang.srt.openai_api.protocol           the same models at their older path
  sglang.srt.function_call.ebnf_composer   grammar builder for constrained decoding (build_ebnf)
  sglang.srt.entrypoints.openai.encoding_dsv4, sglang.srt.function_call.hunyuan_detector,
  sglang.srt.function_call.kimik3_format, sglang.srt.parser.harmony_parser,
  sglang.srt.parser.inkling_tokenizer      other models' formats, imported by reasoning_parser.py
                                           for its other detectors
  sglang.srt.environ (--current-serving)   settings registry read by the newer
                                           base_format_detector.py; answers only
                                           SGLANG_FORWARD_UNKNOWN_TOOLS, with environ.py's default False
The package __init__ modules (sglang, sglang.srt, ...) are not run (sglang/__init__.py imports the
runtime); their folders are only the search path of the modules above.

What runs around the parsers restates SGLang's serving layer, which is not imported (it needs the
server): serving_chat.py splits reasoning first (ReasoningParser: `qwen3-thinking` forces
reasoning, `qwen3` forces it unless enable_thinking is false; parse_non_stream /
parse_stream_chunk call the detector's detect_and_parse / parse_streaming_increment), then hands
the normal text to the tool-call parser (FunctionCallParser.parse_non_stream / parse_stream_chunk:
the detector's detect_and_parse / parse_streaming_increment, every chunk, empty ones too). At the
end of a stream each detector's finish() runs when it has one. The stream answer is what a client
assembles: reasoning and content deltas joined, and per tool_index the name and the joined
parameters; serving_chat's end-of-stream top-up (_check_for_unstreamed_tool_args) is not included.
With --current-serving the stream ends as current serving_chat.py ends it (SERVING_CURRENT below:
the last delta's reasoning parse_stream_end joined into that delta, the tool-call parser's
parse_stream_end, then _check_for_unstreamed_tool_args). The file records the detectors' raw
answers; the test applies parse_non_stream's choice between the detector's normal_text and the
whole text.

Run (Python 3.11, pydantic 2, orjson), with the upstream files this fixture was made from fetched
(exact text, at these commits) into SGLANG/python/sglang/srt/... and PJP/partial_json_parser/...:
  python3 scripts/golden/gen_sglang_parsers.py --sglang-src SGLANG --pjp-src PJP \
   --commit python/sglang/srt/parser/reasoning_parser.py=002e9bfc90a037dc912d3e8525dee06d5d789aa8 \
   --note "python/sglang/srt/parser/reasoning_parser.py=the file up to the end of class Qwen3Detector (its first 13864 characters); the other detectors and ReasoningParser follow it" \
   --commit python/sglang/srt/function_call/qwen25_detector.py=44484b16007246eed60c0e56bb44ad8c2d14071e \
   --commit python/sglang/srt/function_call/base_format_detector.py=00a35ca8a7d4045776246e1b6002c17526e196c1 \
   --commit python/sglang/srt/function_call/core_types.py=2da935778232200b57426c0c253993a44a50a666 \
   --commit python/sglang/srt/function_call/utils.py=00ca197bd8e10b97a9c783bbc6825a547858287e \
   --commit pjp:partial_json_parser/__init__.py=873c4e09c146253a8bb26098a3a1df2db615005b \
   --commit pjp:partial_json_parser/core/api.py=344f2e4c00c74a05c817092d4100a21ce4722265 \
   --commit pjp:partial_json_parser/core/exceptions.py=344f2e4c00c74a05c817092d4100a21ce4722265 \
   --commit pjp:partial_json_parser/core/options.py=344f2e4c00c74a05c817092d4100a21ce4722265 \
   --commit pjp:partial_json_parser/core/complete.py=be77b3f8994d7555c64daf5b343d8de3281fbf4e \
   --commit pjp:partial_json_parser/core/myelin.py=d50d2f313040e08fe0dc88c37fe1dac8f779cdcd
The pins are the versions whose commit the source index could name: the tool-call files are
SGLang's 2025 code (the qwen25 one-shot parse is unchanged since; its stream has since gained a
finish() drain and ensure_ascii=False). A git checkout as --sglang-src gives each file's commit by
itself. The same inputs give the same file byte for byte (the outputs come from a fixed seed).

cases-current.json: the same command with --current-serving, the SGLang tree holding the newest
stored qwen25_detector.py (6472 characters, index id 69296202728: finish() with
_MAX_FINISH_DRAIN_ROUNDS) and base_format_detector.py (24445 characters, index id 70394428886: the
base finish() hook, parallel_tool_calls and get_auto_tool_call_structural_tag that
function_call_parser.py @00828e56 calls), neither with a commit the index can name, so:
   --commit python/sglang/srt/function_call/qwen25_detector.py=unknown \
   --index-id python/sglang/srt/function_call/qwen25_detector.py=69296202728 \
   --commit python/sglang/srt/function_call/base_format_detector.py=unknown \
   --index-id python/sglang/srt/function_call/base_format_detector.py=70394428886 \
plus a --note for each ("commit not known: ..."); the other files as above.
"""

import argparse
import hashlib
import importlib
import json
import logging
import os
import random
import subprocess
import sys
import types

SEED = 20261206
CASES = 600
TOOL_NAMES = ["get_weather", "search"]
# Chunk sizes, cycled over the output; "whole" is one chunk. Every case also gets one chunking of
# its own drawn from the seed (stored with the case).
CHUNKINGS = [[1], [2], [3, 1, 7], [4, 9, 2, 13], [16]]

PACKAGES = [
    "sglang",
    "sglang.srt",
    "sglang.srt.function_call",
    "sglang.srt.parser",
    "sglang.srt.entrypoints",
    "sglang.srt.entrypoints.openai",
    "sglang.srt.openai_api",
]
STUBS = {
    "sglang.srt.entrypoints.openai.protocol": "OpenAI pydantic models; the parsers read only tool.function.name",
    "sglang.srt.openai_api.protocol": "the same models at their older path",
    "sglang.srt.function_call.ebnf_composer": "grammar builder for constrained decoding (build_ebnf)",
    "sglang.srt.entrypoints.openai.encoding_dsv4": "DeepSeek-V4 tokens, for another reasoning detector",
    "sglang.srt.function_call.hunyuan_detector": "Hunyuan tokens, for another reasoning detector",
    "sglang.srt.function_call.kimik3_format": "Kimi K3 markers, for another reasoning detector",
    "sglang.srt.parser.harmony_parser": "gpt-oss Harmony parser, for another reasoning detector",
    "sglang.srt.parser.inkling_tokenizer": "Inkling tokens, for another reasoning detector",
}


# Only for --current-serving: newer base_format_detector.py reads one setting from
# sglang.srt.environ (a settings registry that needs the server); the stub answers it with the
# default environ.py declares (SGLANG_FORWARD_UNKNOWN_TOOLS = EnvBool(False)) and nothing else.
ENVIRON_STUB = {"sglang.srt.environ": "settings registry; envs.SGLANG_FORWARD_UNKNOWN_TOOLS.get() answers its default, False"}


def environ_stub(name):
    mod = types.ModuleType(name)
    mod.envs = types.SimpleNamespace(SGLANG_FORWARD_UNKNOWN_TOOLS=types.SimpleNamespace(get=lambda: False))
    return mod


def stub_module(name):
    mod = types.ModuleType(name)

    def attr(key):
        if key.startswith("__"):
            raise AttributeError(key)
        return type(key, (), {"__module__": name})

    mod.__getattr__ = attr
    return mod


def import_sglang(sglang_src, pjp_src, current_serving):
    py_root = os.path.join(os.path.abspath(sglang_src), "python")
    for pkg in PACKAGES:
        mod = types.ModuleType(pkg)
        mod.__path__ = [os.path.join(py_root, *pkg.split("."))]
        sys.modules[pkg] = mod
    for name in STUBS:
        sys.modules[name] = stub_module(name)
    if current_serving:
        for name in ENVIRON_STUB:
            sys.modules[name] = environ_stub(name)
    if pjp_src:
        sys.path.insert(0, os.path.abspath(pjp_src))
    reasoning = importlib.import_module("sglang.srt.parser.reasoning_parser")
    qwen25 = importlib.import_module("sglang.srt.function_call.qwen25_detector")
    return reasoning, qwen25


def file_record(path, root, commits, index_ids, repo):
    rel = os.path.relpath(path, root)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    commit = commits.get(rel)
    if commit is None and os.path.isdir(os.path.join(root, ".git")):
        commit = subprocess.run(["git", "-C", root, "log", "-1", "--format=%H", "--", rel], capture_output=True, text=True, check=True).stdout.strip()
    if not commit:
        sys.exit(f"no commit for {rel}: pass --commit {rel}=SHA (or =unknown with --index-id)")
    record = {"repo": repo, "path": rel, "commit": commit, "chars": len(text), "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
    if commit == "unknown":
        # A stored copy whose commit the source index does not name: identified by its text
        # (sha256, chars) and the index's id for that text.
        if rel not in index_ids:
            sys.exit(f"{rel}: --commit {rel}=unknown needs --index-id {rel}=ID")
        record.update(commit=None, commitKnown=False, indexId=index_ids[rel])
    return record


def loaded_sources(sglang_src, pjp_src, commits, index_ids):
    out = []
    roots = [(os.path.abspath(sglang_src), "sgl-project/sglang")]
    if pjp_src:
        roots.append((os.path.abspath(pjp_src), "promplate/partial-json-parser"))
    for name in sorted(sys.modules):
        path = getattr(sys.modules[name], "__file__", None)
        if not path:
            continue
        for root, repo in roots:
            if os.path.abspath(path).startswith(root + os.sep):
                out.append(file_record(os.path.abspath(path), root, commits.get(repo, {}), index_ids, repo))
    return out


# ---- generated model outputs ----


class Outputs:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def pick(self, xs):
        return xs[self.r.randrange(len(xs))]

    def digits(self, n):
        return str(self.r.randint(1, 9)) + "".join(str(self.r.randint(0, 9)) for _ in range(n - 1))

    def scalar(self):
        k = self.r.randrange(8)
        if k == 0:
            return self.digits(self.r.randint(1, 3))
        if k == 1:
            return self.digits(self.r.randint(300, 420))  # past a double's range: Python keeps every digit
        if k == 2:
            return "-" + self.digits(self.r.choice([16, 17, 20, 40]))
        if k == 3:
            return self.pick(["1.0", "1e2", "-0.0", "0.1", "1.5e-7", "2.5E+3", "1E400", "-1e999", "1e-400", "3.141592653589793238", "1.7976931348623157e308", "5e-324", "123456789012345678.5"])
        if k == 4:
            return self.pick(["NaN", "Infinity", "-Infinity"])
        if k == 5:
            return self.pick(['"x"', '"café 你好"', '"\\ud83d\\ude00"', '"\\u00e9\\u4f60"', '"\\n\\t\\"\\\\"', '"</tool_call>"', '"<tool_call>\\n"', '"<think>"', '"</think>"', '"\\u0000"', '"😀 naïve"', '""', '"a\\/b"'])
        if k == 6:
            return self.pick(["true", "false", "null"])
        return self.pick(['"2026-12-06"', '"  spaced  "', '"{\\"nested\\": 1}"'])

    def key(self):
        return self.pick(['"b"', '"2"', '"1"', '"10"', '"-1"', '"01"', '"1.5"', '"4294967296"', '"9007199254740993"', '"é"', '"\\u00e9"', '"a b"', '""', '"__proto__"', '"constructor"', '"0"', '"toString"'])

    def value(self, depth):
        x = self.r.random()
        if depth < 3 and x < 0.2:
            return self.obj(depth + 1)
        if depth < 3 and x < 0.32:
            return "[" + self.pick([", ", ","]).join(self.value(depth + 1) for _ in range(self.r.randrange(4))) + "]"
        return self.scalar()

    def obj(self, depth):
        n = self.r.randrange(5)
        sep = self.pick([", ", ",", " , ", ",\n  "])
        colon = self.pick([": ", ":", " : "])
        return "{" + sep.join(f"{self.key()}{colon}{self.value(depth)}" for _ in range(n)) + "}"

    def call(self):
        name = self.pick(['"search"', '"get_weather"', '"search"', '"get_weather"', '"get_weather"', '"unknown"', '""', "null", "1"])
        field = self.pick(['"arguments"', '"arguments"', '"arguments"', '"parameters"'])
        x = self.r.random()
        if x < 0.04:
            return f'{{"name": {name}}}'
        if x < 0.08:
            return f'{{"name": {name}, "parameters": {{}}, "arguments": {self.obj(0)}}}'
        if x < 0.12:
            return f'{{"arguments": {self.obj(0)}, "name": {name}}}'
        args = self.pick(["null", "[]", '""', "0", "[1, 2]", '"text"']) if self.r.random() < 0.1 else self.obj(0)
        return f'{{"name": {name}, {field}: {args}}}'

    def block(self):
        x = self.r.random()
        if x < 0.55:
            body = self.call()
        elif x < 0.65:
            body = "[" + ", ".join(self.call() for _ in range(self.r.randint(1, 3))) + "]"
        elif x < 0.75:
            body = self.pick(["{broken", '{"name": "search", "arguments": {"q": }}', "[1, 2", "", "{}", "[]", '"just a string"', "42"])
        elif x < 0.82:
            return f"<tool_call>\n{self.call()}</tool_call>"  # no newline before the end tag: no block
        elif x < 0.88:
            return f"<tool_call>{self.call()}\n</tool_call>"  # no newline after the start tag
        elif x < 0.94:
            body = self.call() + self.pick([" trailing", "\n\n", "  ", "}"])
        else:
            body = self.pick(["  ", "\n", "\t"]) + self.call() + self.pick(["  ", "\n", ""])
        return f"<tool_call>\n{body}\n</tool_call>"

    def text(self):
        return self.pick(["", "Sure.", " ok ", "\n", "\n\n", "Let me check.\n", "</tool_call>", "<tool_", "<tool_call>", "naïve 😀", "  x  ", "Result: {\"a\": 1}", "<think>", "</think>", "a\u3000b\u2028"])

    def output(self):
        """One model output and the parser configuration it is read with."""
        has_reasoning = self.r.random() < 0.75
        has_tools = self.r.random() < 0.85 or not has_reasoning
        force = has_reasoning and self.r.random() < 0.6
        out = ""
        if has_reasoning and (self.r.random() < 0.25 if force else self.r.random() < 0.55):
            out += "<think>" * self.r.randint(1, 2)
        if force or out:
            out += self.pick(["\nThinking about it.\n", "plan: call search", "", "  x  ", "I need the weather.\n", "naïve 😀 "])
            if self.r.random() < 0.2:
                out += self.block()  # a call written inside the thinking
                if self.r.random() < 0.5:
                    out += self.pick([" more thought ", "\n", ""])
            if self.r.random() < 0.7:
                out += self.pick(["</think>", "</think>\n\n", "\n</think>\n", "</think>  "])
        elif has_reasoning and self.r.random() < 0.15:
            out += self.pick(["Preface ", "\n", ""]) + "<think>late thought</think>"  # a <think> not at the start
        for _ in range(self.r.randrange(5)):
            out += self.text() if self.r.random() < 0.45 else self.block()
        if self.r.random() < 0.12:
            cut = f"<tool_call>\n{self.call()}"
            out += cut[: self.r.randint(1, len(cut))]  # cut off by max_tokens
        reasoning = {"force": force, "stream": self.r.random() < 0.8} if has_reasoning else None
        own = [self.r.randint(1, 12) for _ in range(self.r.randint(1, 6))]
        return {"text": out, "tools": has_tools, "reasoning": reasoning, "ownChunking": own}


# ---- SGLang's parsers, one-shot and streamed ----


def tool_list():
    return [types.SimpleNamespace(function=types.SimpleNamespace(name=n)) for n in TOOL_NAMES]


def one_shot(rp, qwen, case):
    text = case["text"]
    out = {"reasoning": None, "normal": text, "tool": None, "toolOnWhole": None}
    if case["reasoning"] is not None:
        ret = rp.Qwen3Detector(stream_reasoning=case["reasoning"]["stream"], force_reasoning=case["reasoning"]["force"]).detect_and_parse(text)
        out["reasoning"], out["normal"] = ret.reasoning_text, ret.normal_text
    if case["tools"]:
        out["tool"] = tool_one_shot(qwen, out["normal"])
        if case["reasoning"] is not None:
            out["toolOnWhole"] = tool_one_shot(qwen, text)
    return out


def tool_one_shot(qwen, text):
    det = qwen.Qwen25Detector()
    out = {"hasToolCall": det.has_tool_call(text)}
    try:
        ret = det.detect_and_parse(text, tool_list())
    except Exception as e:  # serving_chat.py then answers the text as it is, without calls
        # parse_base_json reads every item with act.get(...): a block holding a non-object (a
        # string, a number, such an array item) raises. The same parse with those items left out
        # is what newer base_format_detector.py versions answer (they skip non-dict items).
        out["error"] = f"{type(e).__name__}: {e}"
        ret = skipping_non_objects(qwen).detect_and_parse(text, tool_list())
    out["normal"] = ret.normal_text
    out["calls"] = [{"name": c.name, "arguments": c.parameters} for c in ret.calls]
    return out


def skipping_non_objects(qwen):
    class SkippingNonObjects(qwen.Qwen25Detector):
        def parse_base_json(self, action, tools):
            items = action if isinstance(action, list) else [action]
            return super().parse_base_json([a for a in items if isinstance(a, dict)], tools)

    return SkippingNonObjects()


def chunks(text, sizes):
    at, k = 0, 0
    while at < len(text):
        n = sizes[k % len(sizes)]
        yield text[at : at + n]
        at, k = at + n, k + 1


class StreamAssembly:
    """One case's detectors (reasoning when the case has it, tool calls when it has tools) and what a
    client assembles from the stream: reasoning and content deltas joined, per tool_index the name
    and the joined parameters."""

    def __init__(self, rp, qwen, case):
        self.rdet = None
        if case["reasoning"] is not None:
            self.rdet = rp.Qwen3Detector(stream_reasoning=case["reasoning"]["stream"], force_reasoning=case["reasoning"]["force"])
        self.tdet = qwen.Qwen25Detector() if case["tools"] else None
        self.tools = tool_list()
        self.reasoning, self.content, self.calls = [], [], {}

    def call(self, index):
        return self.calls.setdefault(index, {"name": None, "arguments": ""})

    def take_tool(self, ret):
        self.content.append(ret.normal_text)
        for c in ret.calls:
            slot = self.call(c.tool_index)
            if c.name:
                slot["name"] = c.name
            slot["arguments"] += c.parameters

    def answer(self):
        calls = self.calls
        return {
            "reasoning": "".join(self.reasoning),
            "content": "".join(self.content),
            "calls": [{"index": i, "name": calls[i]["name"], "arguments": calls[i]["arguments"]} for i in sorted(calls)],
        }


def streamed(rp, qwen, case, sizes):
    a = StreamAssembly(rp, qwen, case)
    rdet, tdet, tools, reasoning, content = a.rdet, a.tdet, a.tools, a.reasoning, a.content
    take_tool = a.take_tool

    def after_reasoning(normal):
        if tdet is None:
            content.append(normal)
        else:
            take_tool(tdet.parse_streaming_increment(normal, tools))

    for piece in chunks(case["text"], sizes):
        normal = piece
        if rdet is not None:
            ret = rdet.parse_streaming_increment(piece)
            reasoning.append(ret.reasoning_text)
            normal = ret.normal_text
        after_reasoning(normal)
    if rdet is not None and hasattr(rdet, "finish"):
        ret = rdet.finish()
        reasoning.append(ret.reasoning_text)
        if ret.normal_text:
            after_reasoning(ret.normal_text)
    if tdet is not None and hasattr(tdet, "finish"):
        take_tool(tdet.finish(tools))
    return a.answer()


# What --current-serving models, with the upstream text it restates (recorded in the fixture).
SERVING_CURRENT = {
    "file": "python/sglang/srt/entrypoints/openai/serving_chat.py",
    "commit": None,
    "indexId": "65936913480",
    "chars": 72696,
    "note": "commit not known: the source index holds this version without a commit id",
    "stream": "_generate_stream_content, per engine delta (the last one carries finish_reason): "
    "_process_reasoning_stream (ReasoningParser.parse_stream_chunk; on the last delta also "
    "parse_stream_end, whose normal text joins that delta's); _process_tool_call_stream "
    "(FunctionCallParser.parse_stream_chunk on every delta, empty ones too; on the last delta "
    "flush=True adds parse_stream_end, i.e. the detector's finish(tools)); then "
    "_check_for_unstreamed_tool_args (the last tracked call's arguments, json.dumps "
    "ensure_ascii=False, minus what was streamed when it starts with that).",
    "functionCallParser": "python/sglang/srt/function_call/function_call_parser.py @00828e568a0030e197c825dfa20f5a180b143d04 "
    "(parse_non_stream, parse_stream_chunk, parse_stream_end)",
}


def streamed_current(rp, qwen, case, sizes):
    """A client's assembly of current serving_chat.py's stream (SERVING_CURRENT["stream"])."""
    a = StreamAssembly(rp, qwen, case)
    rdet, tdet, tools, reasoning, content = a.rdet, a.tdet, a.tools, a.reasoning, a.content
    take_tool = a.take_tool

    # An empty output still ends with one (empty) delta that carries finish_reason.
    pieces = list(chunks(case["text"], sizes)) or [""]
    for k, piece in enumerate(pieces):
        last = k == len(pieces) - 1
        normal = piece
        if rdet is not None:
            ret = rdet.parse_streaming_increment(piece)
            reasoning.append(ret.reasoning_text)
            normal = ret.normal_text
            if last:
                end = rdet.finish()
                reasoning.append(end.reasoning_text)
                normal += end.normal_text
        if tdet is None:
            content.append(normal)
            continue
        take_tool(tdet.parse_streaming_increment(normal, tools))
        if last:
            take_tool(tdet.finish(tools))
            top_up = unstreamed_tool_args(tdet)
            if top_up is not None:
                index, rest = top_up
                a.call(index)["arguments"] += rest
    return a.answer()


def unstreamed_tool_args(det):
    """serving_chat.py _check_for_unstreamed_tool_args: (tool index, argument text) or None."""
    if not det.prev_tool_call_arr or not det.streamed_args_for_tool:
        return None
    index = len(det.prev_tool_call_arr) - 1
    if index < 0 or index >= len(det.streamed_args_for_tool):
        return None
    expected = det.prev_tool_call_arr[index].get("arguments", {})
    expected = expected if isinstance(expected, str) else json.dumps(expected, ensure_ascii=False)
    actual = det.streamed_args_for_tool[index]
    rest = expected[len(actual) :] if expected.startswith(actual) else ""
    return (index, rest) if rest else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sglang-src", required=True, help="root of an SGLang source tree (holds python/sglang/srt/...)")
    ap.add_argument("--pjp-src", help="folder holding the partial_json_parser package, when it is not installed")
    ap.add_argument("--commit", action="append", default=[], help="RELPATH=SHA for a file under --sglang-src (pjp:RELPATH=SHA under --pjp-src)")
    ap.add_argument("--note", action="append", default=[], help="RELPATH=TEXT recorded with that source file (e.g. that it is an excerpt)")
    ap.add_argument("--index-id", action="append", default=[], help="RELPATH=ID: the source index's id of a file passed as --commit RELPATH=unknown")
    ap.add_argument("--current-serving", action="store_true", help="model current serving_chat.py's stream end (reasoning and tool-call parse_stream_end, _check_for_unstreamed_tool_args); default out: cases-current.json")
    ap.add_argument("--out")
    args = ap.parse_args()
    out_name = "cases-current.json" if args.current_serving else "cases.json"
    args.out = args.out or os.path.join(os.path.dirname(__file__), "..", "..", "test", "fixtures", "golden", "sglang-parsers", out_name)
    index_ids = dict(spec.partition("=")[::2] for spec in args.index_id)
    commits = {"sgl-project/sglang": {}, "promplate/partial-json-parser": {}}
    for spec in args.commit:
        rel, _, sha = spec.partition("=")
        repo = "promplate/partial-json-parser" if rel.startswith("pjp:") else "sgl-project/sglang"
        commits[repo][rel.removeprefix("pjp:")] = sha

    # The parsers log every skipped block and unknown tool; the answers are what this records.
    logging.disable(logging.CRITICAL)
    notes = dict(spec.partition("=")[::2] for spec in args.note)
    rp, qwen = import_sglang(args.sglang_src, args.pjp_src, args.current_serving)
    stream = streamed_current if args.current_serving else streamed
    import orjson
    import pydantic

    gen = Outputs(SEED)
    cases = []
    for i in range(CASES):
        case = gen.output()
        sizes_list = CHUNKINGS + [[max(1, len(case["text"]))], case["ownChunking"]]
        answers = {}
        for k, sizes in enumerate(sizes_list):
            key = json.dumps(stream(rp, qwen, case, sizes), ensure_ascii=False, sort_keys=True)
            answers.setdefault(key, []).append(k)
        cases.append(
            {
                "id": f"{i:04d}",
                **case,
                "sglang": {
                    "oneShot": one_shot(rp, qwen, case),
                    # Distinct stream answers, each with the chunkings (indexes into chunkings + [whole, own]) that gave it.
                    "stream": [{"chunkings": ks, **json.loads(key)} for key, ks in answers.items()],
                },
            }
        )

    doc = {
        "generator": "scripts/golden/gen_sglang_parsers.py",
        "python": sys.version.split()[0],
        "orjson": orjson.__version__,
        "pydantic": pydantic.VERSION,
        "seed": SEED,
        "sources": [dict(s, **({"note": notes[s["path"]]} if s["path"] in notes else {})) for s in loaded_sources(args.sglang_src, args.pjp_src, commits, index_ids)],
        "stubbed": {**STUBS, **ENVIRON_STUB} if args.current_serving else STUBS,
        **({"serving": SERVING_CURRENT} if args.current_serving else {}),
        "tools": TOOL_NAMES,
        "chunkings": CHUNKINGS,
        "cases": cases,
    }
    out = os.path.abspath(args.out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"{len(cases)} cases x {len(CHUNKINGS) + 2} chunkings -> {out}")


if __name__ == "__main__":
    main()
