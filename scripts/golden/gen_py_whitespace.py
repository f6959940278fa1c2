#!/usr/bin/env python3
"""Python's whitespace, as str.isspace()/str.strip() see it, for test/unit/util/py-str.test.ts.

Writes test/fixtures/py-whitespace.json: every code point c with chr(c).isspace(), and strip /
lstrip / rstrip of a few strings, computed by CPython itself. Run: python3 scripts/golden/gen_py_whitespace.py
"""
import json
import os
import sys
import unicodedata

SAMPLES = [
    "",
    "  x  ",
    "\ufeffx\ufeff",
    "\x1c\x1d\x1e\x1fx\x85",
    "\u3000\u2028 x y \u2029\u205f",
    "\u200bx\u200b",
    "\u180ex\u180e",
    "\t\n\x0b\x0c\rx\r\n",
    "a" + " " * 50 + "b",
    "\U0001f600 \U0001f600",
]

out = {
    "python": sys.version.split()[0],
    "unidata": unicodedata.unidata_version,
    "whitespace": [c for c in range(0x110000) if chr(c).isspace()],
    "strip": [[s, s.strip(), s.lstrip(), s.rstrip()] for s in SAMPLES],
}
path = os.path.join(os.path.dirname(__file__), "..", "..", "test", "fixtures", "py-whitespace.json")
with open(path, "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=True, indent=1)
    f.write("\n")
print(f"{len(out['whitespace'])} whitespace code points (Python {out['python']}, Unicode {out['unidata']})")
