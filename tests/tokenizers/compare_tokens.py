"""Compares tessera's `tokenize --texts` lines with transformers.js's (reference.mjs).

usage: compare_tokens.py NAME TEXTS.json KNOWN.json REFERENCE.jsonl TESSERA.jsonl TESSERA_BOS.jsonl
Each text must give the same ids without special tokens, the same ids with
them (BOS/EOS as the post-processor adds them; tessera --bos), and the same
decoded text (special tokens kept). Prints one line per text; exit 1 on any
mismatch, or when a text listed in KNOWN.json (known differences, with
their reason) agrees after all.
"""
import json
import sys

name, texts_path, known_path, ref_path, plain_path, bos_path = sys.argv[1:7]
texts = json.load(open(texts_path, encoding="utf-8"))
known = json.load(open(known_path, encoding="utf-8")).get(name, {})
for text in known:
    if text not in texts:
        print(f"FAIL {name}: known difference {text!r} is not among the texts")
        sys.exit(1)


def lines(path):
    return [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]


ref, plain, bos = lines(ref_path), lines(plain_path), lines(bos_path)
if not (len(texts) == len(ref) == len(plain) == len(bos)):
    print(f"FAIL {name}: {len(texts)} texts but {len(ref)} reference, {len(plain)} / {len(bos)} tessera lines")
    sys.exit(1)
failures = 0
round_trips = 0
for i, text in enumerate(texts):
    r, p, b = ref[i], plain[i], bos[i]
    problems = []
    if p["ids"] != r["ids"]:
        problems.append(f"ids {p['ids']} != transformers.js {r['ids']}")
    if b["ids"] != r["ids_special"]:
        problems.append(f"ids with special tokens {b['ids']} != transformers.js {r['ids_special']}")
    if p["decoded"] != r["decoded"]:
        problems.append(f"decoded {p['decoded']!r} != transformers.js {r['decoded']!r}")
    if r["decoded"] == text:
        round_trips += 1
    if text in known:
        if problems:
            print(f"KNOWN {name} text {i} {text!r}: {known[text]}: " + "; ".join(problems))
        else:
            failures += 1
            print(f"FAIL {name} text {i} {text!r}: listed as a known difference but agrees; remove it")
    elif problems:
        failures += 1
        print(f"FAIL {name} text {i} {text!r}: " + "; ".join(problems))
print(f"{name}: {len(texts) - failures - len(known)}/{len(texts)} texts agree with transformers.js, "
      f"{len(known)} known differences, {failures} failures "
      f"({round_trips} texts round-trip exactly through transformers.js's decode)")
sys.exit(1 if failures else 0)
