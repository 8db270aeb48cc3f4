# Shared checking code for the structured-output (JSON Schema constrained
# decoding) test tools: strict JSON parsing of engine output and a Draft
# 2020-12 validator whose "format" and "pattern" checks are really strict.
#
# Used by tests/grammar/gen_schemas.py, tests/grammar/validate_outputs.py and
# bench/make_schema_set.py. Standard library + jsonschema only; run with
# Debian's /usr/bin/python3 (python3-jsonschema 4.10).
#
# What the library (jsonschema 4.10.3 here) does not do, and this module adds:
#   - FormatChecker() checks "date-time" only when rfc3339-validator is
#     installed (it is not), and its "time" is the draft 3 check
#     (strptime "%H:%M:%S": rejects "12:00:00Z", accepts "1:2:3"); "date" is
#     datetime.date.fromisoformat, which also takes "20240105" and
#     "2024-W01-1"; "uuid" accepts extra hyphens; "email" only looks for "@".
#     We register strict RFC 3339 date / time / date-time, canonical
#     8-4-4-4-12 uuid and RFC 5321 mailbox checks on the checker instance.
#   - "pattern" is ECMA-262 in JSON Schema, Python's re differs: "$" also
#     matches before a final "\n", "\d"/"\w" match non-ASCII digits/letters,
#     "." matches "\r". We compile patterns with re.ASCII, "$" -> "\Z" and
#     "." -> "[^\n\r\u2028\u2029]" (outside character classes). ECMA's "\s"
#     includes Unicode spaces; with re.ASCII ours does not (no generated
#     pattern uses "\s").
#   - json.loads accepts NaN/Infinity, turns 1e400 into inf, keeps the last
#     of duplicate keys and accepts lone surrogate escapes; strict_loads
#     rejects all four.

import datetime
import ipaddress
import json
import math
import re

import jsonschema
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError

# ---------------------------------------------------------------- parsing


class StrictJSONError(ValueError):
    pass


def _reject_constant(name):
    raise StrictJSONError(f"non-standard JSON constant {name}")


def _finite_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise StrictJSONError(f"number {text} overflows a double")
    return value


def _no_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise StrictJSONError(f"duplicate object key {key!r}")
        out[key] = value
    return out


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_surrogates(value):
    # A well-formed pair (\ud83d\ude00) is decoded to one code point by the
    # json module, so any surrogate left over is a lone one.
    if isinstance(value, str):
        if _SURROGATE.search(value):
            raise StrictJSONError("string holds a lone surrogate")
    elif isinstance(value, list):
        for v in value:
            _check_surrogates(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_surrogates(k)
            _check_surrogates(v)


def strict_loads(text, allow_lone_surrogates=False):
    """Parses text as exactly one JSON value (RFC 8259), surrounding JSON
    whitespace allowed. Raises ValueError (json.JSONDecodeError or
    StrictJSONError) otherwise."""
    if not isinstance(text, str):
        raise StrictJSONError(f"output is {type(text).__name__}, not text")
    if not allow_lone_surrogates and _SURROGATE.search(text):
        raise StrictJSONError("text holds a lone surrogate code point")
    value = json.loads(text, parse_constant=_reject_constant,
                       parse_float=_finite_float,
                       object_pairs_hook=_no_duplicates)
    if not allow_lone_surrogates:
        _check_surrogates(value)
    return value


# ---------------------------------------------------------------- formats

_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_TIME = re.compile(
    r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?(?:([Zz])|([+-])(\d{2}):(\d{2}))",
    re.ASCII)


def _full_date_ok(text):
    m = _DATE.fullmatch(text)
    if not m:
        return False
    try:
        datetime.date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return False
    return True


def _full_time_ok(text):
    m = _TIME.fullmatch(text)
    if not m:
        return False
    hour, minute, second = int(m[1]), int(m[2]), int(m[3])
    if hour > 23 or minute > 59 or second > 60:
        return False
    offset = 0
    if not m[5]:
        oh, om = int(m[7]), int(m[8])
        if oh > 23 or om > 59:
            return False
        offset = (oh * 60 + om) * (1 if m[6] == "+" else -1)
    if second == 60:
        # A leap second is 23:59:60 UTC only.
        if (hour * 60 + minute - offset) % 1440 != 23 * 60 + 59:
            return False
    return True


def is_rfc3339_date(instance):
    return not isinstance(instance, str) or _full_date_ok(instance)


def is_rfc3339_time(instance):
    return not isinstance(instance, str) or _full_time_ok(instance)


def is_rfc3339_date_time(instance):
    if not isinstance(instance, str):
        return True
    date, sep, time = instance[:10], instance[10:11], instance[11:]
    return sep in ("T", "t") and _full_date_ok(date) and _full_time_ok(time)


_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")


def is_uuid(instance):
    return not isinstance(instance, str) or bool(_UUID.fullmatch(instance))


# RFC 5321 Mailbox, ASCII only: Local-part "@" ( Domain / address-literal ).
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_DOT_ATOM = rf"{_ATEXT}+(?:\.{_ATEXT}+)*"
_QUOTED = r'"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*"'
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_EMAIL = re.compile(
    rf"(?P<local>{_DOT_ATOM}|{_QUOTED})@"
    rf"(?:(?P<domain>{_LABEL}(?:\.{_LABEL})*)|\[(?P<literal>[^\[\]\\]*)\])")


def is_email(instance):
    if not isinstance(instance, str):
        return True
    m = _EMAIL.fullmatch(instance)
    if not m or len(m["local"]) > 64 or len(instance) > 254:
        return False
    if m["literal"] is not None:
        lit = m["literal"]
        try:
            if lit[:5].lower() == "ipv6:":
                ipaddress.IPv6Address(lit[5:])
            else:
                ipaddress.IPv4Address(lit)
        except ValueError:
            return False
    return True


# Formats this module checks itself (replacing the library's check, if any).
OWN_FORMATS = {
    "date": is_rfc3339_date,
    "time": is_rfc3339_time,
    "date-time": is_rfc3339_date_time,
    "uuid": is_uuid,
    "email": is_email,
}


def library_formats():
    """Formats the installed jsonschema checks for Draft 2020-12."""
    checker = getattr(Draft202012Validator, "FORMAT_CHECKER", None)
    if checker is None:
        checker = jsonschema.draft202012_format_checker
    return sorted(checker.checkers)


def make_format_checker(library_only=False):
    """FormatChecker() plus our strict checks (registered on this instance
    only; the class-wide registry is left alone)."""
    checker = FormatChecker()
    if library_only:
        return checker
    for name, func in OWN_FORMATS.items():
        checker.checks(name)(func)
    return checker


def checked_formats(library_only=False):
    return sorted(make_format_checker(library_only).checkers)


def format_sources(library_only=False):
    """format -> who checks it: "own" (this module) or "library"."""
    own = set() if library_only else set(OWN_FORMATS)
    return {f: ("own" if f in own else "library") for f in checked_formats(library_only)}


# What the library's own checks get wrong (jsonschema 4.10.3 without
# rfc3339-validator), for the --library-only summary.
LIBRARY_CAVEATS = {
    "date-time": "not checked (needs rfc3339-validator)",
    "time": "draft 3 rule strptime('%H:%M:%S'): rejects offsets like 12:00:00Z",
    "date": "datetime.date.fromisoformat: also accepts 20240105, 2024-W01-1",
    "uuid": "uuid.UUID plus hyphen positions: accepts extra hyphens",
    "email": "only checks for '@'",
}


# ---------------------------------------------------------------- pattern

_PATTERN_CACHE = {}


def ecma_to_python(pattern):
    """Rewrites the ECMA-262 regex constructs whose Python meaning differs
    (see the header). Handles escapes and character classes; enough for the
    patterns schemas use, not a full ECMA-262 translator."""
    out = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
            out.append(c)
        elif c == "[":
            in_class = True
            out.append(c)
            if pattern[i + 1:i + 2] == "^":
                out.append("^")
                i += 1
            if pattern[i + 1:i + 2] == "]":  # "[]...]": "]" is literal
                out.append("\\]")
                i += 1
        elif c == "$":
            out.append(r"\Z")
        elif c == ".":
            out.append("[^\n\r\u2028\u2029]")
        else:
            out.append(c)
        i += 1
    return "".join(out)


def ecma_search(pattern, text):
    compiled = _PATTERN_CACHE.get(pattern)
    if compiled is None:
        compiled = re.compile(ecma_to_python(pattern), re.ASCII)
        _PATTERN_CACHE[pattern] = compiled
    return compiled.search(text) is not None


def _ecma_pattern(validator, patrn, instance, schema):
    if validator.is_type(instance, "string") and not ecma_search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


StrictDraft202012Validator = jsonschema.validators.extend(
    Draft202012Validator, {"pattern": _ecma_pattern})


def make_validator(schema, library_only=False):
    """A Draft 2020-12 validator with format assertion. library_only gives
    exactly Draft202012Validator(schema, format_checker=FormatChecker())."""
    cls = Draft202012Validator if library_only else StrictDraft202012Validator
    cls.check_schema(schema)
    return cls(schema, format_checker=make_format_checker(library_only))


def _path(error):
    parts = ["$"]
    for p in error.absolute_path:
        parts.append(f"[{p}]" if isinstance(p, int) else f".{p}")
    return "".join(parts)


def first_error(validator, instance):
    """None if instance is valid, else a one-line description of the most
    relevant error."""
    error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    if error is None:
        return None
    return f"{error.message} (at {_path(error)}, schema {'/'.join(map(str, error.absolute_schema_path))})"


_NOT_SCHEMAS = ("const", "enum", "examples", "default")


def formats_used(schema, out=None):
    """The "format" values a schema uses (walks schema positions only)."""
    if out is None:
        out = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "format" and isinstance(value, str):
                out.add(value)
            elif key in ("properties", "$defs", "definitions"):
                if isinstance(value, dict):
                    for sub in value.values():
                        formats_used(sub, out)
            elif key not in _NOT_SCHEMAS:
                formats_used(value, out)
    elif isinstance(schema, list):
        for sub in schema:
            formats_used(sub, out)
    return out


# Keywords whose value is a schema / a list of schemas / a map of schemas.
_SUB_SCHEMA = ("items", "additionalProperties", "not", "contains",
               "propertyNames", "if", "then", "else",
               "unevaluatedItems", "unevaluatedProperties")
_SUB_LIST = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUB_MAP = ("properties", "$defs", "definitions", "patternProperties",
            "dependentSchemas")


def keywords_used(schema, out=None):
    """Every keyword that appears in schema positions, with its count."""
    if out is None:
        out = {}
    if isinstance(schema, dict):
        for key, value in schema.items():
            out[key] = out.get(key, 0) + 1
            if key in _SUB_SCHEMA:
                keywords_used(value, out)
            elif key in _SUB_LIST and isinstance(value, list):
                for sub in value:
                    keywords_used(sub, out)
            elif key in _SUB_MAP and isinstance(value, dict):
                for sub in value.values():
                    keywords_used(sub, out)
    return out
