#!/usr/bin/env python3
"""Golden decision vectors for deposit-swap v2, computed without the Rust code.

This script reads the rule-set definition (src/ruleset/deposit-swap.v2.json)
and interprets it on its own: the rule that answers an (event type, status)
pair, its guard, what an applied transition records, clears and emits, the
revision step, the receipt (with the result a duplicate answers). Fingerprints and the rule-set hash are SHA-256 over
canonical JSON written here with Python's json module.

    python3 tests/vectors/generate_v2_decisions.py           # check decisions.json
    python3 tests/vectors/generate_v2_decisions.py --write   # rewrite its v2 block

Before producing anything it checks itself: the hashes of both built-in
definitions must equal those in rulesets.json (computed with node:crypto), and
interpreting the v1 definition must reproduce every v1 deposit-swap case of
decisions.json that it can interpret (cells, guard mismatches, revisions), so
a misreading of the definition language shows up against goldens that were
computed another way.

The v2 cases are one per cell of the table (6 event types x 9 states,
"(none)" included), named "<EVENT> in <status>: <answer>", then one
IDENTITY_MISMATCH case for every guard field of every guarded row of the table.
They are one block of decisions.json; --write replaces that block and leaves
the text of every other case as it is.
"""

import hashlib
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DECISIONS = HERE / "decisions.json"
RULESETS = HERE / "rulesets.json"
DEFINITIONS = {
    1: ROOT / "src" / "ruleset" / "deposit-swap.v1.json",
    2: ROOT / "src" / "ruleset" / "deposit-swap.v2.json",
}
NAME = "deposit-swap"
NONE = "(none)"
MAX_SAFE_INTEGER = 2**53 - 1

# ------------------------------------------------------------- canonical JSON


def _check_canonicalisable(value, path="$"):
    """RFC 8785 equals json.dumps(sort_keys) only when every key is ASCII (so
    code-point order is UTF-16 order) and every number is an integer that
    prints the same in both; anything else is refused rather than mis-hashed."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not key.isascii():
                raise ValueError(f"{path}: non-ASCII key {key!r}")
            _check_canonicalisable(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_canonicalisable(item, f"{path}[{i}]")
    elif isinstance(value, float):
        raise ValueError(f"{path}: a fraction")
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_SAFE_INTEGER:
        raise ValueError(f"{path}: beyond 2^53")


def canonical(value):
    _check_canonicalisable(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ----------------------------------------------------- the definition, read


class Definition:
    def __init__(self, definition):
        self.definition = definition
        self.id = definition["id"]
        self.version = definition["version"]
        self.hash = "sha256:" + sha256_hex(canonical(definition))
        self.statuses = [s["name"] for s in definition["statuses"]]
        self.states = [NONE] + self.statuses
        self.event_fields = {e["type"]: list(e["fields"]) for e in definition["events"]}
        self.event_types = [e["type"] for e in definition["events"]]
        self.rules = definition["rules"]
        self.otherwise = definition.get("otherwise")

    @staticmethod
    def _listed(value):
        return value if isinstance(value, list) else [value]

    def _matches(self, rule, event_type, state):
        on = rule["on"]
        events = self.event_types if on == "*" else self._listed(on)
        within = rule["in"]
        if within == "*" or "*" in self._listed(within):
            raise ValueError("'in': '*' is not used by the built-ins and not interpreted here")
        return event_type in events and state in self._listed(within)

    def rule_for(self, event_type, state):
        """The one written rule for the pair, or the `otherwise` answer. More
        than one is a definition the verifier refuses; it is refused here too."""
        found = [(i, r) for i, r in enumerate(self.rules) if self._matches(r, event_type, state)]
        if len(found) > 1:
            raise ValueError(f"{event_type} in {state}: rules {[i for i, _ in found]} all answer")
        if found:
            index, rule = found[0]
            return f"rules[{index}]", list(rule.get("guard", [])), rule["then"]
        if self.otherwise is None:
            raise ValueError(f"{event_type} in {state}: no rule and no 'otherwise'")
        return "otherwise", [], self.otherwise

    def rows(self):
        """The table's rows: per event type, per answering rule (in order of the
        first state it answers), the states it answers. Guarded rows carry
        their guard fields."""
        rows = []
        for event_type in self.event_types:
            grouped = {}
            for state in self.states:
                origin, guard, then = self.rule_for(event_type, state)
                grouped.setdefault(origin, (guard, then, []))[2].append(state)
            for origin, (guard, then, states) in grouped.items():
                rows.append({"event": event_type, "rule": origin, "guard": guard, "then": then, "states": states})
        return rows

    # ------------------------------------------------------------ decisions

    def fingerprint(self, event):
        identity = {"type": event["type"], "workflowId": event["workflowId"]}
        for field in self.event_fields[event["type"]]:
            identity[field] = event[field]
        return "fp1:" + sha256_hex(canonical(identity))

    def decide(self, event, workflow):
        """The `expect` of a case with no stored receipt."""
        event_type, event_id, workflow_id = event["type"], event["eventId"], event["workflowId"]
        ids = {"workflowId": workflow_id, "eventId": event_id, "eventType": event_type}
        state = NONE if workflow is None else workflow["status"]
        _, guard, then = self.rule_for(event_type, state)

        for field in guard:
            recorded = workflow.get(field)  # absent and null both count as not recorded
            if recorded != event[field]:
                details = {"field": field, **ids, "recorded": recorded, "actual": event[field]}
                return {"error": {"code": "IDENTITY_MISMATCH", "disposition": "reconcile", "details": details}}

        if "error" in then:
            details = dict(ids)
            if then["error"] == "INVALID_TRANSITION":
                details["status"] = state
            return {"error": {"code": then["error"], "disposition": then["disposition"], "details": details}}

        outcome = then["outcome"]
        fp = self.fingerprint(event)
        write_workflow, outbox = None, []
        if outcome == "applied":
            revision = (0 if workflow is None else workflow["revision"]) + then.get("revisionStep", 1)
            if revision > MAX_SAFE_INTEGER:
                raise ValueError("this script does not produce INVALID_RECORD cases")
            changes = {"status": then["to"], "revision": revision}
            for field in then.get("record", []):
                changes[field] = event[field]
            for field in then.get("clear", []):
                changes[field] = None
            write_workflow = {
                "id": workflow_id,
                "expect": None if workflow is None else {"status": state, "revision": workflow["revision"]},
                "set": changes,
            }
            for emit in then.get("emit", []):
                outbox.append({
                    "id": emit["id"].replace("{workflowId}", workflow_id),
                    "type": emit["type"],
                    "workflowId": workflow_id,
                    "eventId": event_id,
                    "status": "pending",
                    "payload": {field: event[field] for field in emit.get("payload", [])},
                })
        receipt = {
            "eventId": event_id,
            "fingerprint": fp,
            "workflowId": workflow_id,
            "eventType": event_type,
            "outcome": outcome,
            "ruleSet": {"id": self.id, "version": self.version, "hash": self.hash},
            # What this delivery produced, for a later duplicate to answer with.
            "result": {
                "operationIds": [op["id"] for op in outbox],
                "status": None if write_workflow is None else write_workflow["set"]["status"],
                "revision": None if write_workflow is None else write_workflow["set"]["revision"],
            },
        }
        return {"outcome": outcome, "fingerprint": fp,
                "writeSet": {"receipt": receipt, "workflow": write_workflow, "outbox": outbox}}


# ---------------------------------------------------------------- fixtures

# The same events and stored workflows as the v1 cell cases, so the two
# versions' answers can be read side by side.
DEPOSIT = {"depositRef": "btc-mainnet:tx-abc:vout-0", "amountUnits": "12500000"}
EVENTS = {
    "DEPOSIT_DETECTED": {"eventId": "chain-watcher:detected-1", **DEPOSIT},
    "DEPOSIT_CONFIRMED": {"eventId": "chain-watcher:event-001", **DEPOSIT},
    "EXCHANGE_COMPLETED": {"eventId": "exchange:completed-1", "payoutUnits": "4150000000"},
    "PAYOUT_CONFIRMED": {"eventId": "payout:confirmed-1", "payoutRef": "provider:payout-7781"},
    "DEADLINE_PASSED": {"eventId": "timer:deadline-1"},
    "DEPOSIT_REVERSED": {"eventId": "chain-watcher:reversed-1", **DEPOSIT},
}
WORKFLOW_ID = "swap-42"
WORKFLOWS = {
    NONE: None,
    "waiting": {"revision": 1},
    "deposit": {"revision": 2, **DEPOSIT},
    "exchange": {"revision": 3, **DEPOSIT},
    "sending": {"revision": 4, **DEPOSIT, "payoutUnits": "4150000000"},
    "success": {"revision": 5, **DEPOSIT, "payoutUnits": "4150000000", "payoutRef": "provider:payout-7781"},
    "overdue": {"revision": 2},
    # v2 only: detected (revision 2), then reversed (3); the deposit stays recorded.
    "reversed": {"revision": 3, **DEPOSIT},
    "review": {"revision": 3, **DEPOSIT},
}
# The value a mismatching event carries instead of the recorded one.
OTHER = {
    "depositRef": "btc-mainnet:tx-other:vout-0",
    "amountUnits": "12500001",
    "payoutUnits": "4150000001",
    "payoutRef": "provider:payout-9999",
}
FIELD_WORDS = {
    "depositRef": "another deposit",
    "amountUnits": "another amount",
    "payoutUnits": "another payout",
    "payoutRef": "another reference",
}


def event(event_type, **changes):
    fixture = dict(EVENTS[event_type])
    event_id = fixture.pop("eventId")
    return {"eventId": event_id, "workflowId": WORKFLOW_ID, "type": event_type, **fixture, **changes}


def workflow(state):
    fixture = WORKFLOWS[state]
    if fixture is None:
        return None
    revision = fixture["revision"]
    recorded = {k: v for k, v in fixture.items() if k != "revision"}
    return {"id": WORKFLOW_ID, "status": state, "revision": revision, **recorded}


def answer_word(expect):
    return expect["error"]["code"] if "error" in expect else expect["outcome"]


def case(rules, name, evt, wf):
    return {
        "name": name,
        "ruleSet": NAME,
        "ruleSetVersion": rules.version,
        "event": evt,
        "receipt": None,
        "workflow": wf,
        "expect": rules.decide(evt, wf),
    }


def generate(rules):
    cases = []
    for event_type in rules.event_types:
        for state in rules.states:
            evt, wf = event(event_type), workflow(state)
            expect = rules.decide(evt, wf)
            cases.append(case(rules, f"{event_type} in {state}: {answer_word(expect)}", evt, wf))
    for row in rules.rows():
        for i, field in enumerate(row["guard"]):
            # Spread the fields over the row's states: each field is compared on its own.
            state = row["states"][i % len(row["states"])]
            evt = event(row["event"], **{field: OTHER[field]})
            evt["eventId"] += ":b"
            name = f"{row['event']} of {FIELD_WORDS[field]} in {state}: IDENTITY_MISMATCH {field}"
            generated = case(rules, name, evt, workflow(state))
            error = generated["expect"].get("error", {})
            assert error.get("code") == "IDENTITY_MISMATCH" and error["details"]["field"] == field, name
            cases.append(generated)
    return cases


# ------------------------------------------------------------- self-checks


def check_builtin_hashes(definitions):
    builtins = json.loads(RULESETS.read_text())["builtins"]
    for version, rules in definitions.items():
        listed = [b for b in builtins if b["name"] == NAME and b["version"] == version]
        assert len(listed) == 1, f"rulesets.json lists {NAME} v{version} {len(listed)} times"
        assert rules.hash == listed[0]["hash"], f"v{version}: {rules.hash} != rulesets.json {listed[0]['hash']}"


def subset(actual, expected):
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and subset(actual[k], v) for k, v in expected.items())
    return actual == expected


INTERPRETED_ERRORS = {"UNKNOWN_WORKFLOW", "INVALID_TRANSITION", "IDENTITY_MISMATCH"}


def check_v1(rules, all_cases):
    """Every v1 case this interpreter can answer (no receipt, a well-formed
    workflow, an answer from the table) must come out as recorded."""
    checked = 0
    for c in all_cases:
        if c.get("ruleSet", NAME) != NAME or c.get("ruleSetVersion") != 1 or c["receipt"] is not None:
            continue
        expect = c["expect"]
        if "error" in expect and expect["error"]["code"] not in INTERPRETED_ERRORS:
            continue
        mine = rules.decide(c["event"], c["workflow"])
        if "error" in expect:
            ok = "error" in mine and all(mine["error"][k] == expect["error"][k] for k in ("code", "disposition")) \
                and subset(mine["error"]["details"], expect["error"].get("details", {}))
        else:
            ok = mine == expect
        assert ok, f"v1 case {c['name']!r}: interpreted {json.dumps(mine)}, recorded {json.dumps(expect)}"
        checked += 1
    return checked


# ---------------------------------------------------------------- the file


def inline(value):
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def pretty(value, indent):
    """Objects and arrays on one line when they fit in 110 columns, like the
    hand-written cases; otherwise one member a line."""
    text = inline(value)
    if len(text) + indent <= 110 or not isinstance(value, (dict, list)) or not value:
        return text
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k)}: {pretty(v, indent + 2)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [f"{pad}{pretty(v, indent + 2)}" for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def format_case(c):
    members = [f"      {json.dumps(key)}: {pretty(value, 6)}" for key, value in c.items()]
    return "    {\n" + ",\n".join(members) + "\n    }"


def case_spans(text):
    """(case, start, end) of every element of the top-level "cases" array."""
    decoder = json.JSONDecoder()
    at = text.index("[", text.index('"cases"')) + 1
    spans = []
    while True:
        while text[at] in " \t\r\n,":
            at += 1
        if text[at] == "]":
            return spans
        value, end = decoder.raw_decode(text, at)
        spans.append((value, at, end))
        at = end


def is_v2(c):
    return c.get("ruleSet", NAME) == NAME and c.get("ruleSetVersion") == 2


def main(argv):
    definitions = {v: Definition(json.loads(p.read_text())) for v, p in DEFINITIONS.items()}
    for version, rules in definitions.items():
        assert rules.version == version, f"{DEFINITIONS[version]} says version {rules.version}"
    check_builtin_hashes(definitions)
    text = DECISIONS.read_text()
    spans = case_spans(text)
    checked = check_v1(definitions[1], [c for c, _, _ in spans])

    generated = generate(definitions[2])
    names = [c["name"] for c in generated]
    assert len(names) == len(set(names)), "generated case names repeat"
    at = [i for i, s in enumerate(spans) if is_v2(s[0])]
    assert at and at == list(range(at[0], at[-1] + 1)), "the deposit-swap v2 cases must be one block of decisions.json"
    block = spans[at[0]: at[-1] + 1]

    cells = len(definitions[2].event_types) * len(definitions[2].states)
    print(f"v1: {checked} recorded cases reproduced by interpreting {DEFINITIONS[1].name}")
    print(f"v2: {len(generated)} cases ({cells} cells, {len(generated) - cells} guard mismatches), "
          f"rule set hash {definitions[2].hash}")

    if "--write" in argv:
        # The text before the block's first case, the new block, then the text after its last case.
        body = ",\n".join(format_case(c) for c in generated).lstrip()
        DECISIONS.write_text(text[: block[0][1]] + body + text[block[-1][2]:])
        assert [c for c, _, _ in case_spans(DECISIONS.read_text()) if is_v2(c)] == generated
        print(f"wrote {len(generated)} v2 cases to {DECISIONS.relative_to(ROOT)}")
        return 0
    recorded = [c for c, _, _ in block]
    if recorded != generated:
        differing = [g["name"] for g, r in zip(generated, recorded) if g != r]
        print(f"decisions.json differs: {len(recorded)} recorded v2 cases, {len(generated)} generated; "
              f"first differing: {differing[:3]} (run with --write)")
        return 1
    print("decisions.json holds exactly these v2 cases")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
