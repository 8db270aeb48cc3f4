# Builds a random JSON value that validates against a JSON Schema, for the
# structured-output test tools (tests/grammar/gen_schemas.py,
# bench/make_schema_set.py).
#
# It understands only the keyword set those tools generate: type (and type
# arrays), properties / required / additionalProperties, enum, const, anyOf,
# oneOf (branches of pairwise different types), allOf (object branches with
# disjoint properties), $defs / $ref ("#" and "#/$defs/name"), items /
# prefixItems / minItems / maxItems, minLength / maxLength / pattern (from
# PATTERNS) / format (date, time, date-time, uuid, email), minimum / maximum /
# exclusiveMinimum / exclusiveMaximum. Annotations are ignored. Callers
# validate the result with jsoncheck.make_validator.
#
# Recursion terminates because past max_depth the generator takes the
# smallest choice everywhere (minItems items, required properties only, a
# branch that cannot recurse where there is one): schemas must keep every
# recursive reference optional by one of those routes.

import copy
import math
import uuid

import jsoncheck

WORDS = (
    "apple river stone cloud maple orbit pixel amber cedar delta ember falcon "
    "garnet harbor island jasper kettle lantern meadow nectar oasis pepper "
    "quartz raven saddle timber umbra velvet willow yonder zephyr bridge "
    "candle dragon forest glacier hollow ivory jungle knight lemon marble "
    "needle olive planet quiver ribbon silver tunnel violet walnut yellow").split()

# Generators for the patterns the tools emit: pattern -> f(rng) -> str.
# A schema using a pattern not listed here cannot get an instance.


def _letters(rng, alphabet, lo, hi):
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


LOWER = "abcdefghijklmnopqrstuvwxyz"
UPPER = LOWER.upper()
DIGITS = "0123456789"
HEX = "0123456789abcdef"


def _word(rng):
    return rng.choice(WORDS)


PATTERNS = {
    "^[a-z]{2,5}$": lambda r: _letters(r, LOWER, 2, 5),
    "^[A-Z][a-z]+$": lambda r: r.choice(UPPER) + _letters(r, LOWER, 1, 7),
    "^\\d{3}-\\d{4}$": lambda r: _letters(r, DIGITS, 3, 3) + "-" + _letters(r, DIGITS, 4, 4),
    "^[A-Z]{3}$": lambda r: _letters(r, UPPER, 3, 3),
    "^[a-z0-9_]{3,10}$": lambda r: _letters(r, LOWER + DIGITS + "_", 3, 10),
    "^#[0-9a-f]{6}$": lambda r: "#" + _letters(r, HEX, 6, 6),
    "^v\\d+\\.\\d+\\.\\d+$": lambda r: "v%d.%d.%d" % (r.randint(0, 3), r.randint(0, 20), r.randint(0, 99)),
    "^[A-Z]{2}-\\d{2,4}$": lambda r: _letters(r, UPPER, 2, 2) + "-" + _letters(r, DIGITS, 2, 4),
    "^(red|green|blue)$": lambda r: r.choice(["red", "green", "blue"]),
    "^[a-z]+(-[a-z]+)*$": lambda r: "-".join(_word(r) for _ in range(r.randint(1, 3))),
    "^\\d{5}$": lambda r: _letters(r, DIGITS, 5, 5),
    "^[A-Z]{3}-\\d{4}$": lambda r: _letters(r, UPPER, 3, 3) + "-" + _letters(r, DIGITS, 4, 4),
    "^[A-Z]{2}$": lambda r: r.choice(["US", "GB", "DE", "FR", "JP", "CA", "BR", "IN", "AU", "NL"]),
    "^\\+?[0-9]{7,15}$": lambda r: r.choice(["+", ""]) + _letters(r, DIGITS, 7, 15),
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$": lambda r: "-".join(_word(r) for _ in range(r.randint(1, 3))) + str(r.randint(0, 9)),
    "^[0-9]+(\\.[0-9]+){2}$": lambda r: "%d.%d.%d" % (r.randint(0, 9), r.randint(0, 30), r.randint(0, 200)),
    "^[a-z][a-z0-9_]*$": lambda r: _word(r) + r.choice(["", "_id", "_count", "2"]),
    "^sk_[A-Za-z0-9]{8}$": lambda r: "sk_" + _letters(r, LOWER + UPPER + DIGITS, 8, 8),
    # Unanchored or half-anchored: the match may sit anywhere / at one end.
    "ab": lambda r: _letters(r, LOWER, 0, 4) + "ab" + _letters(r, LOWER, 0, 4),
    "^id_": lambda r: "id_" + _letters(r, LOWER + DIGITS, 1, 6),
    "\\.json$": lambda r: _word(r) + ".json",
    "[0-9]": lambda r: _word(r) + str(r.randint(0, 99)),
}


def random_date(rng):
    return "%04d-%02d-%02d" % (rng.randint(1990, 2030), rng.randint(1, 12), rng.randint(1, 28))


def random_time(rng):
    t = "%02d:%02d:%02d" % (rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59))
    if rng.random() < 0.25:
        t += "." + "".join(rng.choice(DIGITS) for _ in range(rng.randint(1, 3)))
    if rng.random() < 0.6:
        return t + "Z"
    return t + "%s%02d:%s" % (rng.choice("+-"), rng.randint(0, 12), rng.choice(["00", "30", "45"]))


def random_email(rng):
    return "%s.%s@%s" % (_word(rng), _word(rng), rng.choice(
        ["example.com", "mail.example.org", "test.io", "corp.example.net"]))


FORMATS = {
    "date": random_date,
    "time": random_time,
    "date-time": lambda r: random_date(r) + "T" + random_time(r),
    "uuid": lambda r: str(uuid.UUID(int=r.getrandbits(128), version=4)),
    "email": random_email,
}

_ANNOTATIONS = {"title", "description", "examples", "default", "$comment", "$schema", "$id"}
_CONTAINERS = ("object", "array")


class Hooks:
    """Override to make values realistic. Each returns None for "no idea";
    a proposal that breaks the schema's own constraints is dropped."""

    def string(self, hint, schema, rng):
        return None

    def number(self, hint, lo, hi, integer, rng):
        return None

    def key(self, hint, rng):
        return None


class InstanceGenerator:
    def __init__(self, root, rng, hooks=None, optional_p=0.6, extra_p=0.25,
                 max_depth=6, map_p=0.6):
        self.root = root
        self.rng = rng
        self.hooks = hooks or Hooks()
        self.optional_p = optional_p
        self.extra_p = extra_p
        self.map_p = map_p  # extra_p for objects without "properties" (maps)
        self.max_depth = max_depth
        self.reserved = set()  # property names extras must avoid (allOf)
        self.unsafe = self.unsafe_targets(root)

    def generate(self):
        return self.gen(self.root, 0, None)

    # -- helpers

    def resolve(self, ref):
        if ref == "#":
            return self.root
        prefix = "#/$defs/"
        if not ref.startswith(prefix):
            raise ValueError(f"unsupported $ref {ref!r}")
        return self.root["$defs"][ref[len(prefix):]]

    @staticmethod
    def refs_in(schema, out):
        """The $ref values inside schema (not following them)."""
        if isinstance(schema, dict):
            for k, v in schema.items():
                if k == "$ref" and isinstance(v, str):
                    out.add(v)
                elif k == "properties" and isinstance(v, dict):
                    for sub in v.values():
                        InstanceGenerator.refs_in(sub, out)
                elif k not in ("const", "enum", "examples", "default", "$defs"):
                    InstanceGenerator.refs_in(v, out)
        elif isinstance(schema, list):
            for v in schema:
                InstanceGenerator.refs_in(v, out)
        return out

    def unsafe_targets(self, root):
        """The $ref targets from which a cycle of references is reachable:
        following one may recurse again."""
        if not isinstance(root, dict):
            return set()
        targets = ["#"] + ["#/$defs/" + n for n in root.get("$defs", {})]
        edges = {t: self.refs_in(self.resolve(t), set()) for t in targets}
        reach = {}
        for t in targets:
            seen, todo = set(), list(edges[t])
            while todo:
                x = todo.pop()
                if x not in seen:
                    seen.add(x)
                    todo.extend(edges.get(x, ()))
            reach[t] = seen
        cyclic = {t for t in targets if t in reach[t]}
        return {t for t in targets if t in cyclic or reach[t] & cyclic}

    def may_recurse(self, schema):
        return bool(self.refs_in(schema, set()) & self.unsafe)

    def scalar(self, hint):
        """Any scalar, for "true" schemas (additionalProperties: true)."""
        kind = self.rng.choice(["string", "string", "integer", "boolean", "null", "number"])
        if kind == "string":
            return self.string({}, hint)
        if kind in ("integer", "number"):
            value = self.hooks.number(hint, None, None, kind == "integer", self.rng)
            if value is not None:
                return value
        if kind == "integer":
            return self.rng.randint(-50, 500)
        if kind == "number":
            return round(self.rng.uniform(-100, 100), 2)
        if kind == "boolean":
            return self.rng.random() < 0.5
        return None

    # -- the walk

    def gen(self, s, depth, hint):
        if depth > self.max_depth + 40:
            raise RecursionError("schema recursion does not terminate")
        deep = depth >= self.max_depth
        if s is True:
            return self.scalar(hint)
        if s is False:
            raise ValueError("false schema has no instance")
        if "$ref" in s:
            return self.gen(self.resolve(s["$ref"]), depth + 1, hint)
        if "const" in s:
            return copy.deepcopy(s["const"])
        if "enum" in s:
            return copy.deepcopy(self.rng.choice(s["enum"]))
        if "allOf" in s:
            out = {}
            saved = self.reserved
            self.reserved = set(saved)
            for branch in s["allOf"]:
                self.reserved.update(branch.get("properties", {}))
            for branch in s["allOf"]:
                value = self.gen(branch, depth + 1, hint)
                if not isinstance(value, dict):
                    raise ValueError("allOf supported for object branches only")
                out.update(value)
            self.reserved = saved
            return out
        for key in ("anyOf", "oneOf"):
            if key in s:
                branches = s[key]
                if deep:
                    flat = [b for b in branches if not self.may_recurse(b)]
                    branches = flat or branches
                return self.gen(self.rng.choice(branches), depth + 1, hint)
        t = s.get("type")
        if isinstance(t, list):
            choices = t
            if deep:
                choices = [x for x in t if x not in _CONTAINERS] or t
            t = self.rng.choice(choices)
        if t is None:
            if "properties" in s or "additionalProperties" in s or "required" in s:
                t = "object"
            elif "items" in s or "prefixItems" in s:
                t = "array"
            else:
                return self.scalar(hint)
        return getattr(self, "gen_" + t)(s, depth, hint)

    def gen_null(self, s, depth, hint):
        return None

    def gen_boolean(self, s, depth, hint):
        return self.rng.random() < 0.5

    def gen_string(self, s, depth, hint):
        return self.string(s, hint)

    def string(self, s, hint):
        rng = self.rng
        lo = s.get("minLength", 0)
        hi = s.get("maxLength", max(lo, 24))
        value = self.hooks.string(hint, s, rng)
        if value is not None and self.string_ok(value, s):
            return value
        if "format" in s:
            return FORMATS[s["format"]](rng)
        if "pattern" in s:
            return PATTERNS[s["pattern"]](rng)
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
        if lo <= len(text) <= hi:
            return text
        want = rng.randint(lo, hi)
        while len(text) < want:
            text += " " + rng.choice(WORDS)
        text = text[:want]
        return text[:-1] + "s" if text.endswith(" ") else text

    @staticmethod
    def string_ok(value, s):
        if not isinstance(value, str):
            return False
        if not s.get("minLength", 0) <= len(value) <= s.get("maxLength", len(value)):
            return False
        if "pattern" in s and not jsoncheck.ecma_search(s["pattern"], value):
            return False
        check = jsoncheck.OWN_FORMATS.get(s.get("format"))
        return check is None or check(value)

    def bounds(self, s, integer):
        lo = s.get("minimum")
        hi = s.get("maximum")
        if "exclusiveMinimum" in s:
            em = s["exclusiveMinimum"]
            lo = em + 1 if integer else em + 0.01
        if "exclusiveMaximum" in s:
            em = s["exclusiveMaximum"]
            hi = em - 1 if integer else em - 0.01
        return lo, hi

    def gen_integer(self, s, depth, hint):
        lo, hi = self.bounds(s, True)
        value = self.hooks.number(hint, lo, hi, True, self.rng)
        if value is not None and (lo is None or value >= lo) and (hi is None or value <= hi):
            return value
        if lo is None and hi is None:
            lo, hi = (0, 100) if self.rng.random() < 0.6 else (-10000, 10000)
        elif lo is None:
            lo = hi - self.rng.choice([10, 100, 1000])
        elif hi is None:
            hi = lo + self.rng.choice([10, 100, 1000])
        return self.rng.randint(lo, hi)

    def gen_number(self, s, depth, hint):
        lo, hi = self.bounds(s, False)
        value = self.hooks.number(hint, lo, hi, False, self.rng)
        if value is not None and (lo is None or value >= lo) and (hi is None or value <= hi):
            return value
        if lo is None and hi is None:
            lo, hi = -1000.0, 1000.0
        elif lo is None:
            lo = hi - 100
        elif hi is None:
            hi = lo + 100
        if self.rng.random() < 0.2:
            ilo, ihi = math.ceil(lo), math.floor(hi)
            if ilo <= ihi:
                return self.rng.randint(ilo, ihi)
        value = round(self.rng.uniform(lo, hi), self.rng.choice([1, 2, 3]))
        return min(max(value, lo), hi)

    def new_key(self, taken, hint):
        for _ in range(50):
            key = self.hooks.key(hint, self.rng) or self.rng.choice(WORDS) + "_" + self.rng.choice(WORDS)
            if key not in taken and key not in self.reserved:
                return key
        raise ValueError("could not find a fresh property name")

    def gen_object(self, s, depth, hint):
        deep = depth >= self.max_depth
        props = s.get("properties", {})
        required = s.get("required", [])
        extra = s.get("additionalProperties", True)
        out = {}
        for name, sub in props.items():
            if name in required or (not deep and self.rng.random() < self.optional_p):
                out[name] = self.gen(sub, depth + 1, name)
        for name in required:
            if name not in out:
                out[name] = self.gen(extra, depth + 1, name)
        if extra is not False and not deep:
            p = self.extra_p if props else self.map_p
            while self.rng.random() < p and len(out) < len(props) + 4:
                key = self.new_key(set(props) | set(out), hint)
                out[key] = self.gen(extra, depth + 1, key)
        return out

    def gen_array(self, s, depth, hint):
        deep = depth >= self.max_depth
        prefix = s.get("prefixItems", [])
        items = s.get("items", True)
        lo = s.get("minItems", 0)
        hi = s.get("maxItems", max(lo, len(prefix)) + 3)
        if items is False:
            hi = min(hi, len(prefix))
        n = lo if deep else self.rng.randint(lo, hi)
        out = []
        for i in range(n):
            sub = prefix[i] if i < len(prefix) else items
            out.append(self.gen(sub, depth + 1, hint))
        return out
