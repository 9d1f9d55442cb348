#!/usr/bin/env python3
"""Writes the fuzz seed corpus (fuzz/corpus/<target>/) from tests/vectors/*.json
and the built-in rule sets. Idempotent; run from anywhere. The corpus itself is
not committed: it grows during campaigns and this script rebuilds its seeds.

Targets that take a rule set read it from the first byte (even: deposit-swap,
odd: order-shipment); the rest is the JSON text under test."""

import hashlib
import json
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
VECTORS = ROOT / "tests" / "vectors"
CORPUS = pathlib.Path(__file__).resolve().parent / "corpus"


def load(name):
    with open(VECTORS / f"{name}.json", encoding="utf-8") as f:
        return json.load(f)


# A slice of a few seconds per target (`make test`) leaves out the rule sets
# with a `facts` block: one proof of deposit-swap v3 takes minutes in the
# instrumented build, past the slice. Campaigns (`make fuzz`) keep them.
SLICE = int(os.environ.get("IDEMFLOW_FUZZ_SECONDS", "3600")) < 60


def heavy(target, data):
    if target != "ruleset" or not SLICE:
        return False
    try:
        definition = json.loads(data)
    except ValueError:
        return False
    return isinstance(definition, dict) and "facts" in definition


def write(target, data):
    directory = CORPUS / target
    directory.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogatepass")
    name = hashlib.sha1(data).hexdigest()
    if heavy(target, data):
        (directory / name).unlink(missing_ok=True)
        return
    (directory / name).write_bytes(data)


def selector(case):
    return b"\x01" if case.get("ruleSet") == "order-shipment" else b"\x00"


def text(value):
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def main():
    counts = {}
    events = []
    for name in ("fingerprint", "validation"):
        for case in load(name)["cases"]:
            events.append((selector(case), case.get("event")))
    for case in load("decisions")["cases"]:
        events.append((selector(case), case.get("event")))
        decide_input = {"event": case.get("event"), "receipt": case.get("receipt"), "workflow": case.get("workflow")}
        write("decide", selector(case) + text(decide_input))
        write("json", selector(case) + text(decide_input))
    for sel, event in events:
        write("validate", sel + text(event))
        write("json", sel + text(event))
        write("decide", sel + text({"event": event, "receipt": None, "workflow": None}))

    rulesets = load("rulesets")
    for group in ("broken", "malformed", "hashes"):
        for case in rulesets[group]:
            if "definitionText" in case:
                write("ruleset", case["definitionText"])
            if "definition" in case:
                write("ruleset", json.dumps(case["definition"]))
    for builtin in (ROOT / "src" / "ruleset").glob("*.json"):
        write("ruleset", builtin.read_text(encoding="utf-8"))

    # Outbox: the first byte picks the entry point (see fuzz_targets/outbox.rs),
    # the next 16 are two numbers, the rest is JSON text.
    numbers = (1_700_000_000_000).to_bytes(8, "little") + (3).to_bytes(8, "little")
    requests = [
        {"operationId": "start-exchange:swap-1", "attempt": 1},
        {"operationId": "send-payout:swap-2", "attempt": 7},
        {"operationId": "op:1", "attempt": 1, "now": 1_700_000_000_000, "result": {"ok": True}},
        {"operationId": "op:1", "attempt": 2, "now": 1_700_000_000_000,
         "result": {"ok": False, "name": "IdemflowError", "code": "STORE_UNAVAILABLE", "message": "down",
                    "retryable": True, "disposition": "retry", "stopping": False}},
        {"maxAttempts": 3, "baseDelayMs": 100, "maxDelayMs": 60000, "leaseMs": 30000},
    ]
    for first in range(0, 256, 7):
        for request in requests:
            write("outbox", bytes([first]) + numbers + text(request))

    # Payloads: the RFC 8785 test files and the number vectors, as JSON text.
    jcs = VECTORS / "jcs"
    for path in sorted((jcs / "input").glob("*.json")):
        write("payload", path.read_bytes())
    for case in load("jcs/numbers")["cases"]:
        if "text" in case:
            write("payload", f'[{case["text"]}, {{"n": {case["text"]}}}]')

    for target in sorted(p.name for p in CORPUS.iterdir()):
        counts[target] = len(os.listdir(CORPUS / target))
    print("seed corpus:", ", ".join(f"{t} {n}" for t, n in counts.items()))


if __name__ == "__main__":
    main()
