#!/usr/bin/python3
# Checks structured-output engine results against their JSON Schemas.
#
#   /usr/bin/python3 tests/grammar/validate_outputs.py RESULTS.jsonl [--library-only]
#
# Each line of RESULTS.jsonl is {"id": ..., "schema": {...}, "output": "<text>"}
# or, when the engine refused or failed, {"id": ..., "schema": {...},
# "error": "<message>"}. The output text must be exactly one JSON value
# (JSON whitespace around it allowed; NaN / Infinity, numbers that overflow a
# double, duplicate keys and lone surrogates rejected) that validates under
# Draft 2020-12 with format assertion.
#
# Prints a JSON summary on stdout:
#   {"checked": lines with an output, "passed": ..., "engine_errors": lines
#    with an error instead, "invalid_lines": input lines that are not a
#    record, "failures": [{"id", "error", "output"}, first 20],
#    "engine_error_samples": [{"id", "error"}, first 20],
#    "checked_formats": formats really asserted, "format_sources": which
#    of them this tool checks itself ("own") and which the library does,
#    "unchecked_formats_used": formats schemas use that nothing asserts}
# Exit status: 0 all passed, 1 a failure, engine error or bad line, 2 usage.
#
# The checks (see tests/grammar/jsoncheck.py) are stricter than plain
# jsonschema 4.10: strict RFC 3339 date / time / date-time (the library has
# no date-time check without rfc3339-validator and checks "time" by the
# draft 3 rule), canonical uuid, RFC 5321 email, ECMA-262 "$" / "\d" / "."
# in "pattern". --library-only validates with exactly
# Draft202012Validator(schema, format_checker=FormatChecker()) instead.
#
# Standard library + jsonschema only; run with Debian's /usr/bin/python3.

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jsoncheck  # noqa: E402

MAX_LISTED = 20
MAX_OUTPUT_CHARS = 400


def clip(text):
    if isinstance(text, str) and len(text) > MAX_OUTPUT_CHARS:
        return text[:MAX_OUTPUT_CHARS] + f"... ({len(text)} chars)"
    return text


def check_record(record, library_only, allow_lone_surrogates):
    """None if the record's output is valid, else the reason."""
    schema = record.get("schema")
    try:
        validator = jsoncheck.make_validator(schema, library_only=library_only)
    except Exception as e:  # SchemaError, unresolvable $ref, bad regex...
        return f"invalid schema: {type(e).__name__}: {str(e).splitlines()[0]}"
    try:
        value = jsoncheck.strict_loads(record["output"], allow_lone_surrogates)
    except (ValueError, RecursionError) as e:
        return f"not one JSON value: {e}"
    try:
        return jsoncheck.first_error(validator, value)
    except Exception as e:  # e.g. a $ref the resolver cannot follow
        return f"validation crashed: {type(e).__name__}: {e}"


def main():
    ap = argparse.ArgumentParser(description="Validate engine outputs against their JSON Schemas.")
    ap.add_argument("file", help="results .jsonl ('-' for stdin)")
    ap.add_argument("--library-only", action="store_true",
                    help="plain jsonschema checks (no strict formats / ECMA patterns)")
    ap.add_argument("--allow-lone-surrogates", action="store_true",
                    help="accept strings with unpaired \\uD800-\\uDFFF escapes")
    args = ap.parse_args()

    try:
        stream = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")
    except OSError as e:
        print(f"validate_outputs: {e}", file=sys.stderr)
        return 2

    checked = passed = engine_errors = invalid_lines = 0
    failures, engine_samples, formats = [], [], set()
    with stream:
        for lineno, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict) or not isinstance(record.get("schema"), (dict, bool)):
                    raise ValueError("no \"schema\"")
                if "output" not in record and "error" not in record:
                    raise ValueError("neither \"output\" nor \"error\"")
            except ValueError as e:
                invalid_lines += 1
                if len(failures) < MAX_LISTED:
                    failures.append({"id": None, "error": f"line {lineno}: not a result record: {e}",
                                     "output": clip(line.rstrip("\n"))})
                continue
            formats |= jsoncheck.formats_used(record["schema"])
            if "output" not in record:
                engine_errors += 1
                if len(engine_samples) < MAX_LISTED:
                    engine_samples.append({"id": record.get("id"), "error": clip(str(record["error"]))})
                continue
            checked += 1
            reason = check_record(record, args.library_only, args.allow_lone_surrogates)
            if reason is None:
                passed += 1
            elif len(failures) < MAX_LISTED:
                failures.append({"id": record.get("id"), "error": reason,
                                 "output": clip(record["output"])})

    checked_formats = jsoncheck.checked_formats(args.library_only)
    summary = {
        "checked": checked,
        "passed": passed,
        "engine_errors": engine_errors,
        "invalid_lines": invalid_lines,
        "failures": failures,
        "engine_error_samples": engine_samples,
        "checked_formats": checked_formats,
        "format_sources": jsoncheck.format_sources(args.library_only),
        "unchecked_formats_used": sorted(formats - set(checked_formats)),
        "mode": "library-only" if args.library_only else "strict",
    }
    if args.library_only:
        summary["library_caveats"] = jsoncheck.LIBRARY_CAVEATS
    json.dump(summary, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")
    ok = passed == checked and engine_errors == 0 and invalid_lines == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
