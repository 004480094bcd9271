#!/usr/bin/env python3
"""Writes edited/: the sessions of one old build's directory as other JSON
tools leave them (keys in reverse order, white space after separators,
non-ASCII escaped as \\uXXXX, every event time at a +02:00 offset). Each record
stays one line, so each file is still a valid session file; migrating it
must give back the original byte for byte.

Usage: python3 edit.py SRC_DIR OUT_DIR
"""
import datetime, json, os, re, sys

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def offset(s):
    # 2026-12-02T00:37:59.650108635Z -> 2026-12-02T02:37:59.650108635+02:00,
    # keeping every digit of the fraction (datetime keeps only six).
    m = re.match(r"^(.*T\d\d:\d\d:\d\d)(\.\d+)?Z$", s)
    t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S") + datetime.timedelta(hours=2)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (m.group(2) or "") + "+02:00"


# Raw JSON the ledger keeps as it was given (a tool call's input, a task's
# schema, a deliverable, a provider's raw response): its key order is the
# content, which migrate keeps; it gets white space and escapes only.
RAW = {("approval_request", "input"), ("task", "schema"), ("run_end", "deliverable"), ("step", "raw")}


def edit(v, parent="", key=""):
    if (parent, key) in RAW:
        return v
    if isinstance(v, dict):
        return {k: edit(v[k], key, k) for k in reversed(list(v))}
    if isinstance(v, list):
        return [edit(x, parent, key) for x in v]
    if isinstance(v, str) and key in ("time", "expires_at") and TIME.match(v):
        return offset(v)
    return v


src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
for name in sorted(os.listdir(src)):
    if not name.endswith(".jsonl"):
        continue
    lines = []
    for line in open(os.path.join(src, name), encoding="utf-8").read().splitlines():
        lines.append(json.dumps(edit(json.loads(line)), ensure_ascii=True))
    with open(os.path.join(out, name), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
