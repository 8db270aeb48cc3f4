#!/usr/bin/python3
# Self-test of the structured-output test tools (no engine needed):
#   /usr/bin/python3 tests/grammar/selftest.py
#
# 1. gen_schemas.py is deterministic (and schema i does not depend on
#    --count), and its instances for seeds 1..3 pass validate_outputs.py when
#    fed back as outputs;
# 2. hand-made broken outputs fail, and borderline-valid ones pass
#    (validate_outputs.check_record, strict mode);
# 3. end to end: a broken output and an engine error line make
#    validate_outputs.py exit 1 and are counted in its summary.
# Also prints how many generated instances plain jsonschema (--library-only)
# rejects, to show why the strict format checks exist.
#
# Standard library + jsonschema only; run with Debian's /usr/bin/python3.

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from validate_outputs import check_record  # noqa: E402

PY = sys.executable
COUNT = 200

S = lambda **kw: kw  # noqa: E731  (schema literal helper)
OBJ = S(type="object", properties={"a": S(type="integer")}, required=["a"],
        additionalProperties=False)

# (schema, output text, must pass?)
CASES = [
    # -- not exactly one strict JSON value
    (OBJ, '{"a": 1} x', False),
    (S(type="integer"), "1 2", False),
    (S(type="number"), "NaN", False),
    (S(type="number"), "Infinity", False),
    (S(type="number"), "-Infinity", False),
    (S(type="number"), "1e400", False),
    (OBJ, '{"a": 1, "a": 2}', False),
    (S(type="string"), '"\\ud800"', False),
    (S(type="array"), "[1,]", False),
    (OBJ, "{'a': 1}", False),
    (OBJ, '{"a": ', False),
    (OBJ, "", False),
    (OBJ, "\ufeff{\"a\": 1}", False),
    (OBJ, "\u00a0{\"a\": 1}", False),
    (S(type="string"), '"tab\there"', False),  # raw control character
    (S(type="integer"), "01", False),
    # -- keyword violations
    (OBJ, "{}", False),
    (OBJ, '{"a": 1, "b": 2}', False),
    (OBJ, '{"a": "1"}', False),
    (S(type="integer"), "1.5", False),
    (S(type="integer", exclusiveMaximum=10), "10", False),
    (S(type="integer", minimum=-5), "-6", False),
    (S(type="number", minimum=0, maximum=100), "100.01", False),
    (S(type="string", minLength=2), '"\\ud83d\\ude00"', False),  # 1 code point
    (S(type="string", maxLength=3), '"abcd"', False),
    (S(enum=["red", "green"]), '"Red"', False),
    (S(enum=[1, True]), "true ", True),
    (S(enum=[1, None]), "true", False),
    (S(const={"k": [1, 2]}), '{"k": [2, 1]}', False),
    (S(type=["string", "null"]), "0", False),
    (S(type="array", prefixItems=[S(type="string")], items=False), '["a", 1]', False),
    (S(type="array", items=S(type="integer"), maxItems=2), "[1, 2, 3]", False),
    (S(type="array", minItems=1), "[]", False),
    (S(oneOf=[S(type="string"), S(type="integer")]), "true", False),
    (S(oneOf=[S(type="integer"), S(type="number")]), "1", False),  # both match
    (S(anyOf=[S(type="string"), S(type="null")]), "1", False),
    (S(allOf=[S(type="object", required=["x"]), S(type="object", required=["y"])]), '{"x": 1}', False),
    ({"$defs": {"n": S(type="object", properties={"c": S(type="array", items={"$ref": "#/$defs/n"})},
                       additionalProperties=False)}, "$ref": "#/$defs/n"},
     '{"c": [{"c": [{"d": 1}]}]}', False),
    (S(type="object", properties={"next": {"$ref": "#"}, "v": S(type="integer")}, additionalProperties=False),
     '{"v": 1, "next": {"v": "x"}}', False),
    # -- pattern (ECMA-262 semantics)
    (S(type="string", pattern="^[a-z]{2,5}$"), '"abc\\n"', False),
    (S(type="string", pattern="^\\d{3}-\\d{4}$"), '"\u0661\u0662\u0663-\u0664\u0665\u0666\u0667"', False),
    (S(type="string", pattern="^\\d{3}-\\d{4}$"), '"555-1234"', True),
    (S(type="string", pattern="ab"), '"xxabyy"', True),
    (S(type="string", pattern="^[A-Z][a-z]+$"), '"Hello"', True),
    (S(type="string", pattern="^[A-Z][a-z]+$"), '"hello"', False),
    # -- formats
    (S(type="string", format="date"), '"2024-02-30"', False),
    (S(type="string", format="date"), '"20240105"', False),
    (S(type="string", format="date"), '"2024-W01-1"', False),
    (S(type="string", format="date"), '"2024-02-29"', True),
    (S(type="string", format="date-time"), '"2024-01-05 10:00:00Z"', False),
    (S(type="string", format="date-time"), '"2024-01-05T10:00:00"', False),
    (S(type="string", format="date-time"), '"2024-01-05T24:00:00Z"', False),
    (S(type="string", format="date-time"), '"2024-01-05T10:00:00+25:00"', False),
    (S(type="string", format="date-time"), '"2024-01-05T10:00:00.123+05:30"', True),
    (S(type="string", format="date-time"), '"2024-01-05t10:00:00z"', True),
    (S(type="string", format="time"), '"12:00:00"', False),
    (S(type="string", format="time"), '"1:2:3Z"', False),
    (S(type="string", format="time"), '"12:00:00Z"', True),
    (S(type="string", format="time"), '"23:59:60Z"', True),
    (S(type="string", format="time"), '"00:29:60+00:30"', True),
    (S(type="string", format="time"), '"22:59:60Z"', False),
    (S(type="string", format="uuid"), '"12345678-1234-1234-1234-1234-56789ab"', False),
    (S(type="string", format="uuid"), '"{12345678-1234-1234-1234-123456789abc}"', False),
    (S(type="string", format="uuid"), '"12345678-1234-1234-1234-123456789ABC"', True),
    (S(type="string", format="email"), '"no-at-sign"', False),
    (S(type="string", format="email"), '"a@b@c.com"', False),
    (S(type="string", format="email"), '"john doe@example.com"', False),
    (S(type="string", format="email"), '"@example.com"', False),
    (S(type="string", format="email"), '"\\"john doe\\"@example.com"', True),
    (S(type="string", format="email"), '"x@[127.0.0.1]"', True),
    (S(type="string", format="email"), '"first.last+tag@mail.example.org"', True),
    # -- borderline but valid JSON
    (OBJ, ' \n\t{"a": 1}\r\n ', True),
    (OBJ, '{"a": 1.0}', True),  # 2020-12: an integer is a number with zero fraction
    (S(type="string", maxLength=1), '"\\ud83d\\ude00"', True),
    (S(type="number"), "-0", True),
    (S(type="number"), "1E+2", True),
]


def run(args, **kw):
    return subprocess.run([PY] + args, capture_output=True, text=True, **kw)


def main():
    ok = True
    tmp = tempfile.mkdtemp(prefix="grammar_selftest_")
    gen = os.path.join(HERE, "gen_schemas.py")
    val = os.path.join(HERE, "validate_outputs.py")

    # 1. generator: determinism and round trip
    a, b, c = (os.path.join(tmp, n) for n in ("a.jsonl", "b.jsonl", "c.jsonl"))
    for path, count in ((a, 30), (b, 30), (c, 10)):
        r = run([gen, "--seed", "7", "--count", str(count), "--out", path, "--instances"])
        assert r.returncode == 0, r.stderr
    same = open(a).read() == open(b).read()
    prefix = open(a).read().startswith(open(c).read())
    print(f"deterministic: {same}, count-independent: {prefix}")
    ok &= same and prefix

    for seed in (1, 2, 3):
        schemas = os.path.join(tmp, f"seed{seed}.jsonl")
        outputs = os.path.join(tmp, f"seed{seed}_out.jsonl")
        r = run([gen, "--seed", str(seed), "--count", str(COUNT), "--out", schemas, "--instances"])
        if r.returncode != 0:
            print(f"seed {seed}: generator failed\n{r.stderr}")
            ok = False
            continue
        with open(schemas) as f, open(outputs, "w") as g:
            for line in f:
                rec = json.loads(line)
                g.write(json.dumps({"id": rec["id"], "schema": rec["schema"],
                                    "output": json.dumps(rec["instance"], ensure_ascii=False)}) + "\n")
        r = run([val, outputs])
        summary = json.loads(r.stdout)
        lib = json.loads(run([val, outputs, "--library-only"]).stdout)
        print(f"seed {seed}: rc={r.returncode} checked={summary['checked']} passed={summary['passed']}"
              f" (library-only would pass {lib['passed']})")
        ok &= r.returncode == 0 and summary["passed"] == COUNT

    # 2. hand-made cases
    bad = 0
    for i, (schema, output, want_pass) in enumerate(CASES):
        reason = check_record({"schema": schema, "output": output}, False, False)
        if (reason is None) != want_pass:
            bad += 1
            print(f"case {i}: expected {'pass' if want_pass else 'fail'}, got {reason!r}\n"
                  f"  schema={json.dumps(schema)} output={output!r}")
    n_fail = sum(1 for c in CASES if not c[2])
    print(f"hand-made cases: {len(CASES) - bad}/{len(CASES)} as expected "
          f"({n_fail} must fail, {len(CASES) - n_fail} must pass)")
    ok &= bad == 0

    # 3. end to end with failures and an engine error
    mixed = os.path.join(tmp, "mixed.jsonl")
    with open(mixed, "w") as f:
        f.write(json.dumps({"id": 0, "schema": OBJ, "output": '{"a": 1}'}) + "\n")
        f.write(json.dumps({"id": 1, "schema": OBJ, "output": '{"a": NaN}'}) + "\n")
        f.write(json.dumps({"id": 2, "schema": OBJ, "output": '{"a": 1, "b": 0}'}) + "\n")
        f.write(json.dumps({"id": 3, "schema": OBJ, "error": "grammar: unsupported keyword"}) + "\n")
    r = run([val, mixed])
    summary = json.loads(r.stdout)
    e2e = (r.returncode == 1 and summary["checked"] == 3 and summary["passed"] == 1
           and summary["engine_errors"] == 1 and [f["id"] for f in summary["failures"]] == [1, 2])
    print(f"end to end: rc={r.returncode} checked={summary['checked']} passed={summary['passed']} "
          f"engine_errors={summary['engine_errors']} failures={[f['error'] for f in summary['failures']]}")
    ok &= e2e

    print("SELFTEST", "OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
