#!/usr/bin/python3
# Random JSON Schemas (Draft 2020-12) for testing the structured-output
# (constrained decoding) engine: feed each schema to the engine, collect its
# output, and check it with tests/grammar/validate_outputs.py.
#
#   /usr/bin/python3 tests/grammar/gen_schemas.py --seed 1 --count 200 \
#       --out /tmp/schemas.jsonl [--instances]
#
# Writes one JSON object a line: {"id": i, "schema": {...}} and, with
# --instances, "instance": a value that validates (asserted here with the
# strict validator of tests/grammar/jsoncheck.py). Deterministic for a seed;
# schema i does not depend on --count.
#
# Features, randomly combined and nested (depth <= 4): type (every type and
# type arrays), properties / required / additionalProperties (false mostly,
# true, a schema, or omitted), objects without properties, enum, const,
# anyOf (2-3 branches), oneOf (branches of pairwise different types, never
# both integer and number), allOf (2 object branches, disjoint properties,
# additionalProperties omitted), $defs / $ref including recursive defs and
# "#" root refs (recursion always optional), items / prefixItems (+ items
# false or a schema) / minItems / maxItems (0..4), minLength / maxLength
# (0..12) / pattern / format (date, date-time, time, uuid, email; never with
# pattern or lengths), integer and number bounds, title / description.
# Schemas are kept small: the estimated longest output of a sampling model
# stays under about 300 tokens.
#
# Standard library + jsonschema only; run with Debian's /usr/bin/python3.

import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jsoncheck  # noqa: E402
from schema_instances import InstanceGenerator  # noqa: E402

DRAFT = "https://json-schema.org/draft/2020-12/schema"
MAX_DEPTH = 4
TOKEN_BUDGET = 300

KEYS = ("id name title label count total price score enabled active tags "
        "items values status kind level owner email created updated date "
        "notes color size weight width height mode priority version source "
        "target parent user city country code amount unit ratio flag rank "
        "index note summary value key text url path host port zone group").split()
# Rarely used property names that trip naive grammar builders: JSON
# Schema keywords as names, escapes, spaces, non-ASCII.
ODD_KEYS = ["type", "format", "required", "$ref", "first name", 'say "hi"',
            "back\\slash", "naïve", "日本語", "e-mail", ""]
WORDS = ("alpha beta gamma delta red green blue small medium large north "
         "south east west open closed pending done yes no low high new old "
         "cat dog fox owl bee ant elk yak").split()
ODD_STRINGS = ["it's", 'say "hi"', "tab\there", "line\nbreak", "naïve",
               "日本", "emoji 🙂", "back\\slash", "", " "]
SIMPLE_PATTERNS = ["^[a-z]{2,5}$", "^[A-Z][a-z]+$", "^\\d{3}-\\d{4}$",
                   "^[A-Z]{3}$", "^[a-z0-9_]{3,10}$", "^#[0-9a-f]{6}$",
                   "^v\\d+\\.\\d+\\.\\d+$", "^[A-Z]{2}-\\d{2,4}$",
                   "^(red|green|blue)$", "ab", "^id_", "\\.json$", "[0-9]"]
FORMAT_NAMES = ["date", "date-time", "time", "uuid", "email"]
SCALARS = ["string", "number", "integer", "boolean", "null"]
KEYWORDS = {  # every keyword a generated schema may use
    "type", "properties", "required", "additionalProperties", "enum", "const",
    "anyOf", "oneOf", "allOf", "$defs", "$ref", "items", "prefixItems",
    "minItems", "maxItems", "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "title", "description", "$schema",
}


class SchemaGenerator:
    def __init__(self, rng):
        self.rng = rng
        self.defs = {}
        self.plain_defs = []  # names of non-recursive defs, reusable

    # -- small helpers

    def chance(self, p):
        return self.rng.random() < p

    def keys(self, n, avoid=()):
        out = []
        while len(out) < n:
            key = self.rng.choice(ODD_KEYS) if self.chance(0.04) else self.rng.choice(KEYS)
            if key not in out and key not in avoid:
                out.append(key)
        return out

    def word(self):
        return self.rng.choice(ODD_STRINGS) if self.chance(0.05) else self.rng.choice(WORDS)

    def def_name(self, base):
        name, i = base, 2
        while name in self.defs:
            name, i = f"{base}{i}", i + 1
        return name

    def annotate(self, s, p=0.12):
        if self.chance(p):
            s["title"] = self.rng.choice(WORDS).capitalize() + " " + self.rng.choice(["record", "value", "entry", "item"])
        if self.chance(p):
            s["description"] = "The " + " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(2, 6))) + "."
        return s

    # -- nodes

    def node(self, depth):
        if depth >= MAX_DEPTH:
            kinds = ["scalar"] * 6 + ["enum", "const", "typearray"]
        else:
            kinds = (["scalar"] * 5 + ["object"] * 4 + ["array"] * 3 +
                     ["enum", "const", "typearray", "anyOf", "oneOf", "allOf", "ref"])
        kind = self.rng.choice(kinds)
        if kind == "scalar":
            s = self.typed(self.rng.choice(SCALARS), depth)
        elif kind in ("object", "array"):
            s = self.typed(kind, depth)
        else:
            s = getattr(self, kind)(depth)
        return self.annotate(s)

    def typed(self, t, depth):
        """A schema with exactly "type": t."""
        if t == "string":
            return self.string()
        if t == "integer":
            return self.integer()
        if t == "number":
            return self.number()
        if t == "object":
            return self.object(depth)
        if t == "array":
            return self.array(depth)
        return {"type": t}

    def string(self):
        s = {"type": "string"}
        r = self.rng.random()
        if r < 0.2:
            s["pattern"] = self.rng.choice(SIMPLE_PATTERNS)
        elif r < 0.4:
            s["format"] = self.rng.choice(FORMAT_NAMES)
        elif r < 0.75:
            lo = self.rng.randint(0, 6)
            if self.chance(0.7):
                s["minLength"] = lo
            if self.chance(0.85):
                s["maxLength"] = self.rng.randint(max(lo, 1), 12)
        return s

    def integer(self):
        s = {"type": "integer"}
        r = self.rng.random()
        lo = self.rng.choice([0, 1, -5, -100, 10, 1900])
        hi = lo + self.rng.choice([2, 9, 50, 200, 1000])
        if r < 0.25:
            s["minimum"], s["maximum"] = lo, hi
        elif r < 0.4:
            s["exclusiveMinimum"], s["exclusiveMaximum"] = lo, hi
        elif r < 0.5:
            s["minimum"], s["exclusiveMaximum"] = lo, hi
        elif r < 0.6:
            s["minimum"] = lo
        elif r < 0.7:
            s["exclusiveMaximum" if self.chance(0.5) else "maximum"] = hi
        return s

    def number(self):
        s = {"type": "number"}
        r = self.rng.random()
        if r < 0.4:
            lo = self.rng.choice([0, -1, -180, 1])
            s["minimum"], s["maximum"] = lo, lo + self.rng.choice([1, 100, 360, 1000])
        elif r < 0.55:
            s["minimum"] = 0
        return s

    def object(self, depth):
        s = {"type": "object"}
        if self.chance(0.15):  # no "properties"
            r = self.rng.random()
            if r < 0.35:
                s["additionalProperties"] = self.typed(self.rng.choice(["string", "integer", "boolean"]), MAX_DEPTH)
            elif r < 0.55:
                s["additionalProperties"] = True
            elif r < 0.65:
                s["additionalProperties"] = False  # only {} is valid
            if s.get("additionalProperties") is not False and self.chance(0.3):
                s["required"] = self.keys(1)
            return s
        n = self.rng.randint(1, max(1, 5 - depth))
        names = self.keys(n)
        s["properties"] = {k: self.node(depth + 1) for k in names}
        req = [k for k in names if self.chance(0.6)]
        if req:
            s["required"] = req
        r = self.rng.random()
        if r < 0.7:
            s["additionalProperties"] = False
        elif r < 0.8:
            s["additionalProperties"] = True
        elif r < 0.92:
            s["additionalProperties"] = self.typed(self.rng.choice(["string", "integer", "number", "boolean"]), MAX_DEPTH)
        return s

    def array(self, depth):
        s = {"type": "array"}
        r = self.rng.random()
        if r < 0.35:  # prefixItems, then items false / a schema / omitted
            n = self.rng.randint(1, 3)
            s["prefixItems"] = [self.node(depth + 1) for _ in range(n)]
            r2 = self.rng.random()
            if r2 < 0.6:
                s["items"] = False
            elif r2 < 0.9:
                s["items"] = self.node(depth + 1)
            if self.chance(0.5):
                s["minItems"] = self.rng.randint(0, n)
            if s.get("items") is not False:
                s["maxItems"] = self.rng.randint(max(n, s.get("minItems", 0)), 4)
            return s
        if r < 0.95:
            s["items"] = self.node(depth + 1)
        lo = self.rng.randint(0, 2) if self.chance(0.5) else None
        if lo is not None:
            s["minItems"] = lo
        if self.chance(0.85) or "items" not in s or s["items"].get("type") in ("object", "array"):
            s["maxItems"] = self.rng.randint(max(lo or 0, 1), 4) if self.chance(0.95) else 0
            if s["maxItems"] < (lo or 0):
                s["minItems"] = s["maxItems"]
        return s

    def enum(self, depth):
        r = self.rng.random()
        if r < 0.4:
            values = self.rng.sample(WORDS, self.rng.randint(1, 5))
            if self.chance(0.2):
                values.append(self.rng.choice(ODD_STRINGS))
            s = {"enum": values}
            if self.chance(0.4):
                s = {"type": "string", **s}
            return s
        if r < 0.6:
            return {"enum": self.rng.sample([0, 1, 2, 3, -1, 1.5, -0.25, 100, 3.14159, 1e3], self.rng.randint(2, 4))}
        if r < 0.7:
            return {"enum": [True, False]} if self.chance(0.7) else {"enum": [self.chance(0.5)]}
        pool = [self.rng.choice(WORDS), self.rng.randint(-9, 99), True, False, None, 2.5, "null", "true", "1"]
        return {"enum": self.rng.sample(pool, self.rng.randint(2, 5))}

    def const(self, depth):
        r = self.rng.random()
        if r < 0.4:
            value = self.word()
        elif r < 0.6:
            value = self.rng.choice([0, 7, -3, 2.5, 1000000, 0.001])
        elif r < 0.75:
            value = self.chance(0.5)
        elif r < 0.85:
            value = None
        elif r < 0.93:
            value = {self.rng.choice(KEYS): self.rng.choice(WORDS), "n": self.rng.randint(0, 9)}
        else:
            value = [self.rng.randint(0, 9), self.rng.choice(WORDS)]
        return {"const": value}

    def typearray(self, depth):
        r = self.rng.random()
        if r < 0.65:
            t = self.rng.choice(SCALARS[:4] + ["object", "array"] if depth < MAX_DEPTH else SCALARS[:4])
            s = self.typed(t, depth)
            s["type"] = [t, "null"] if self.chance(0.7) else ["null", t]
            return s
        types = self.rng.sample(SCALARS + (["object", "array"] if depth < MAX_DEPTH - 1 else []),
                                self.rng.choice([2, 2, 3]))
        return {"type": types}

    def anyOf(self, depth):
        return {"anyOf": [self.node(depth + 1) for _ in range(self.rng.randint(2, 3))]}

    def oneOf(self, depth):
        pool = ["string", self.rng.choice(["integer", "number"]), "boolean", "null", "object", "array"]
        types = self.rng.sample(pool, self.rng.randint(2, 3))
        return {"oneOf": [self.typed(t, depth + 1) for t in types]}

    def allOf(self, depth):
        names = self.keys(self.rng.randint(2, 5))
        cut = self.rng.randint(1, len(names) - 1)
        branches = []
        for part in (names[:cut], names[cut:]):
            b = {"type": "object", "properties": {k: self.node(depth + 2) for k in part}}
            req = [k for k in part if self.chance(0.6)]
            if req:
                b["required"] = req
            branches.append(b)
        s = {"allOf": branches}
        if self.chance(0.3):
            s = {"type": "object", **s}
        return s

    def ref(self, depth):
        if self.plain_defs and self.chance(0.5):
            return {"$ref": "#/$defs/" + self.rng.choice(self.plain_defs)}
        if self.chance(0.35):
            return self.recursive()
        name = self.def_name(self.rng.choice(["address", "point", "tag", "money", "person", "code"]))
        self.defs[name] = None  # reserve the name while building
        self.defs[name] = self.node(max(depth, 2))
        self.plain_defs.append(name)
        return {"$ref": "#/$defs/" + name}

    def recursive(self):
        """Adds a recursive def (optional recursion) and returns a use of it."""
        kind = self.rng.choice(["tree", "list", "expr", "json", "folder"])
        if kind == "tree":
            name = self.def_name("node")
            ref = {"$ref": "#/$defs/" + name}
            self.defs[name] = {
                "type": "object",
                "properties": {
                    "label": {"type": "string", "maxLength": 8},
                    "children": {"type": "array", "items": ref, "maxItems": 2},
                },
                "required": ["label"] + (["children"] if self.chance(0.5) else []),
                "additionalProperties": False,
            }
        elif kind == "list":
            name = self.def_name("list")
            ref = {"$ref": "#/$defs/" + name}
            if self.chance(0.5):
                nxt = {"anyOf": [ref, {"type": "null"}]}
                req = ["value", "next"]
            else:
                nxt, req = ref, ["value"]
            self.defs[name] = {
                "type": "object",
                "properties": {"value": {"type": "integer", "minimum": 0, "maximum": 99}, "next": nxt},
                "required": req,
                "additionalProperties": False,
            }
        elif kind == "expr":
            name = self.def_name("expr")
            ref = {"$ref": "#/$defs/" + name}
            self.defs[name] = {"anyOf": [
                {"type": "integer", "minimum": -9, "maximum": 9},
                {"type": "object",
                 "properties": {"op": {"enum": ["+", "-", "*"]},
                                "args": {"type": "array", "items": ref, "maxItems": 2}},
                 "required": ["op", "args"],
                 "additionalProperties": False},
            ]}
        elif kind == "json":
            name = self.def_name("json")
            ref = {"$ref": "#/$defs/" + name}
            self.defs[name] = {
                "type": ["string", "integer", "boolean", "null", "array", "object"],
                "maxLength": 6,
                "items": ref, "maxItems": 2,
                "additionalProperties": ref,
            }
        else:
            name = self.def_name("folder")
            ref = {"$ref": "#/$defs/" + name}
            fname = self.def_name("file")
            self.defs[fname] = {
                "type": "object",
                "properties": {"name": {"type": "string", "pattern": "\\.json$"},
                               "size": {"type": "integer", "minimum": 0}},
                "required": ["name"],
                "additionalProperties": False,
            }
            self.plain_defs.append(fname)
            self.defs[name] = {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "pattern": "^[a-z]{2,5}$"},
                    "entries": {"type": "array", "maxItems": 3,
                                "items": {"anyOf": [{"$ref": "#/$defs/" + fname}, ref]}},
                },
                "required": ["name", "entries"],
                "additionalProperties": False,
            }
        if self.chance(0.3):
            return {"type": "array", "items": ref, "maxItems": 2}
        return dict(ref)

    # -- a whole schema

    def root(self):
        self.defs = {}
        self.plain_defs = []
        r = self.rng.random()
        if r < 0.1:
            s = self.recursive()
        elif r < 0.75:
            s = self.object(0)
            if "properties" in s and self.chance(0.12):  # "#" recursion
                key = self.keys(1, avoid=s["properties"])[0]
                s["properties"][key] = (
                    {"$ref": "#"} if self.chance(0.5)
                    else {"type": "array", "items": {"$ref": "#"}, "maxItems": 2})
                if "required" in s:
                    s["required"] = [k for k in s["required"] if k != key]
        else:
            s = self.node(0)
        if self.defs:
            s = {**s, "$defs": self.defs}
        s = self.annotate(s, 0.25)
        if self.chance(0.35):
            s = {"$schema": DRAFT, **s}
        return s


def estimate_tokens(s, root, refs=0):
    """A rough upper estimate of the tokens a sampling model spends on a
    valid output (recursion expanded one level)."""
    if s is True or s == {}:
        return 10
    if s is False:
        return 0
    if "$ref" in s:
        if refs >= 1:
            return 2
        target = root if s["$ref"] == "#" else root["$defs"][s["$ref"].split("/")[-1]]
        return estimate_tokens(target, root, refs + 1)
    if "const" in s or "enum" in s:
        values = [s["const"]] if "const" in s else s["enum"]
        return max(len(json.dumps(v)) for v in values) // 3 + 1
    if "anyOf" in s or "oneOf" in s:
        return max(estimate_tokens(b, root, refs) for b in s.get("anyOf", s.get("oneOf")))
    if "allOf" in s:
        return sum(estimate_tokens(b, root, refs) for b in s["allOf"])
    t = s.get("type")
    if isinstance(t, list):
        return max(estimate_tokens({**s, "type": x}, root, refs) for x in t)
    if t == "string":
        if "format" in s:
            return {"date": 7, "time": 9, "date-time": 15, "uuid": 25, "email": 12}[s["format"]]
        if "pattern" in s:
            return 8
        return s.get("maxLength", 40) // 2 + 2
    if t in ("integer", "number"):
        return 5
    if t in ("boolean", "null"):
        return 2
    if t == "object" or "properties" in s:
        total = 2
        for k, v in s.get("properties", {}).items():
            total += len(k) // 4 + 3 + estimate_tokens(v, root, refs)
        extra = s.get("additionalProperties", True)
        if extra is not False:
            total += 2 * (5 + estimate_tokens(extra, root, refs))
        return total
    if t == "array" or "items" in s or "prefixItems" in s:
        prefix = s.get("prefixItems", [])
        total = 2 + sum(estimate_tokens(p, root, refs) + 1 for p in prefix)
        items = s.get("items", True)
        rest = s.get("maxItems", len(prefix) + 4) - len(prefix)
        if items is not False and rest > 0:
            total += rest * (estimate_tokens(items, root, refs) + 1)
        return total
    return 10


def make_schema(rng):
    """The first of up to 50 tries that fits TOKEN_BUDGET (else the smallest)."""
    best = None
    for _ in range(50):
        s = SchemaGenerator(rng).root()
        cost = estimate_tokens(s, s)
        if cost <= TOKEN_BUDGET:
            return s
        if best is None or cost < best[0]:
            best = (cost, s)
    return best[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__ and __doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--out", required=True, help="output .jsonl ('-' for stdout)")
    ap.add_argument("--instances", action="store_true",
                    help="add a valid instance to each schema")
    args = ap.parse_args()

    master = random.Random(args.seed)
    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    for i in range(args.count):
        rng = random.Random(master.getrandbits(64))
        schema = make_schema(rng)
        record = {"id": i, "schema": schema}
        extra = set(jsoncheck.keywords_used(schema)) - KEYWORDS
        assert not extra, f"schema {i}: unexpected keywords {extra}"
        validator = jsoncheck.make_validator(schema)  # also checks the metaschema
        if args.instances:
            instance = InstanceGenerator(schema, rng).generate()
            error = jsoncheck.first_error(validator, instance)
            assert error is None, f"schema {i}: generated instance invalid: {error}\n{json.dumps(record)}\n{json.dumps(instance)}"
            record["instance"] = instance
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    if out is not sys.stdout:
        out.close()


if __name__ == "__main__":
    main()
