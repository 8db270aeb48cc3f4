"""Renders chat templates with Jinja2 as Hugging Face's apply_chat_template
does: a sandboxed environment with trim_blocks, lstrip_blocks and the
loopcontrols extension; tojson as json.dumps (ensure_ascii=False, keys in
order); raise_exception and strftime_now as globals; the variables messages,
tools, documents (None unless given), add_generation_prompt, the
tokenizer_config.json's bos_token / eos_token, and any other variable the case
gives.

usage: /usr/bin/python3 render_jinja2.py TOKENIZER_CONFIG.json CASES.json DATE OUTDIR
For case N it writes OUTDIR/N.input.json (what `tessera chat-template
--messages` reads), OUTDIR/N.flags (extra tessera flags) and OUTDIR/N.expected
(the rendering) or OUTDIR/N.error (the message of the template's
raise_exception). strftime_now() formats DATE (YYYY-MM-DD, 00:00 UTC).
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

config_path, cases_path, date, outdir = sys.argv[1:5]
config = json.load(open(config_path, encoding="utf-8"))
cases = json.load(open(cases_path, encoding="utf-8"))
fixed = datetime.datetime.strptime(date, "%Y-%m-%d").replace(tzinfo=datetime.timezone.utc)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return fixed.strftime(fmt)


def token(key):
    t = config.get(key)
    if isinstance(t, dict):
        t = t.get("content")
    return t


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = strftime_now
template = env.from_string(config["chat_template"])

for n, case in enumerate(cases):
    conversation = case["input"]
    variables = dict(conversation) if isinstance(conversation, dict) else {"messages": conversation}
    variables.setdefault("tools", None)
    variables.setdefault("documents", None)
    for key in ("bos_token", "eos_token"):
        if token(key) is not None:
            variables[key] = token(key)
    variables["add_generation_prompt"] = case["add_generation_prompt"]
    with open(os.path.join(outdir, f"{n}.input.json"), "w", encoding="utf-8") as f:
        json.dump(conversation, f, ensure_ascii=False)
    with open(os.path.join(outdir, f"{n}.flags"), "w", encoding="utf-8") as f:
        f.write("--add-generation-prompt" if case["add_generation_prompt"] else "")
    try:
        text = template.render(**variables)
        with open(os.path.join(outdir, f"{n}.expected"), "w", encoding="utf-8", newline="") as f:
            f.write(text)
    except jinja2.exceptions.TemplateError as e:
        with open(os.path.join(outdir, f"{n}.error"), "w", encoding="utf-8") as f:
            f.write(str(e))
    with open(os.path.join(outdir, f"{n}.name"), "w", encoding="utf-8") as f:
        f.write(case["name"])
print(len(cases))
