'use strict';
// The decision table of a rule-set definition that may not verify, so that a
// draft can be inspected (`idemflow rules table draft.json`). A verified rule
// set has its table from the core (RuleSet#table, #tableMarkdown); the core
// only builds a RuleSet once every property holds, so for a draft this file
// lays the definition's rules out the same way: which rule answers which
// (event type, status) pair, as written. It decides nothing: a cell that two
// rules claim shows both, an empty one shows nothing. A test holds the output
// equal to the core's table for every built-in rule set.

const { verifyRuleSet } = require('../core/decide.cjs');
const { conditionText } = require('../core/graph.cjs');

const NONE = '(none)';
const ANY = '*';

function list(value) {
  return Array.isArray(value) ? value : [value];
}

function names(value) {
  return Array.isArray(value) ? [...value] : [];
}

/** A `when` as its list of conditions (one condition, or an array of them). */
function conditionsOf(when) {
  return Array.isArray(when) && when.length > 0 && typeof when[0] === 'object' && when[0] !== null ? when : [when];
}

/** A condition as the core's rows show it and its words. */
function conditionOf(condition) {
  let answer;
  if (Array.isArray(condition)) answer = [...condition];
  else if (condition.other !== undefined) answer = { other: [...new Set(list(condition.other))] };
  else answer = { emitted: condition.emitted };
  return { answer, summary: conditionText(answer) };
}

/** The answer as the core's table rows show it (`answer`) and its one-line summary. */
function answerOf(rule) {
  let cases = rule.cases;
  if (cases === undefined) {
    if (rule.when === undefined) return outcomeOf(rule.then);
    const conditions = conditionsOf(rule.when);
    if (conditions.length === 1 && Array.isArray(conditions[0])) {
      const when = conditionOf(conditions[0]);
      const then = outcomeOf(rule.then);
      const otherwise = outcomeOf(rule.else);
      return {
        answer: { when: when.answer, then: then.answer, else: otherwise.answer },
        summary: `when ${when.summary}: ${then.summary}; else ${otherwise.summary}`,
        cases: [
          [when.summary, then.summary],
          ['else', otherwise.summary],
        ],
      };
    }
    cases = [{ when: rule.when, then: rule.then }, { then: rule.else }];
  }
  if (cases.length === 1) return outcomeOf(cases[0].then);
  const answers = [];
  const parts = [];
  const byCase = [];
  for (const c of cases) {
    const then = outcomeOf(c.then);
    if (c.when === undefined) {
      answers.push({ then: then.answer });
      parts.push(`else ${then.summary}`);
      byCase.push(['else', then.summary]);
    } else {
      const conditions = conditionsOf(c.when).map(conditionOf);
      answers.push({ when: conditions.map((x) => x.answer), then: then.answer });
      const when = conditions.map((x) => x.summary).join(' and ');
      parts.push(`when ${when}: ${then.summary}`);
      byCase.push([when, then.summary]);
    }
  }
  return { answer: { cases: answers }, summary: parts.join('; '), cases: byCase };
}

/** One answer (a rule's `then` or `else`, or `otherwise`) and its summary. */
function outcomeOf(then) {
  if (then.error !== undefined) {
    const disposition = then.disposition ?? (then.error === 'UNKNOWN_WORKFLOW' ? 'retry' : 'reconcile');
    return { answer: { error: then.error, disposition }, summary: `${then.error} (${disposition})` };
  }
  if (then.outcome === 'already-applied') return { answer: { outcome: 'already-applied' }, summary: 'already-applied' };
  if (then.outcome === 'stale') return { answer: { outcome: 'stale' }, summary: 'stale (receipt only)' };
  const record = names(then.record);
  const clear = names(then.clear);
  const emit = (then.emit ?? []).map((e) => ({ type: e.type, id: e.id, payload: names(e.payload), recurring: e.recurring === true }));
  let summary = `applied → ${then.to}`;
  if (record.length > 0) summary += `; records ${record.join(', ')}`;
  if (clear.length > 0) summary += `; clears ${clear.join(', ')}`;
  for (const e of emit) summary += `; emits ${e.type} \`${e.id}\``;
  return {
    answer: { outcome: 'applied', to: then.to, record, clear, emit, revisionStep: then.revisionStep ?? 1 },
    summary,
  };
}

/**
 * The rows of a well-formed definition's decision table, in the shape of
 * RuleSet#table(): one row per rule and event type, with the statuses it
 * answers. Throws RULESET_INVALID (with details.path) when the definition is
 * malformed; use `verifyRuleSet` for whether it is sound.
 */
function tableOfDefinition(definition) {
  const report = verifyRuleSet(definition); // refuses a malformed definition with its path
  const text = typeof definition === 'string' ? definition : JSON.stringify(definition);
  const { statuses, events, rules, otherwise } = JSON.parse(text);
  const states = [NONE, ...statuses.map((s) => s.name)];
  const eventTypes = events.map((e) => e.type);

  // cells[event][state]: the rules that answer the pair, in the order they are written.
  const cells = eventTypes.map(() => states.map(() => []));
  const entries = rules.map((rule, i) => ({ origin: `rules[${i}]`, guard: names(rule.guard), ...answerOf(rule) }));
  rules.forEach((rule, index) => {
    const on = list(rule.on).flatMap((name) => (name === ANY ? eventTypes : [name]));
    const inStates = list(rule.in).flatMap((name) => (name === ANY ? states.slice(1) : [name]));
    for (const event of on) {
      for (const state of inStates) {
        const cell = cells[eventTypes.indexOf(event)][states.indexOf(state)];
        if (!cell.includes(index)) cell.push(index);
      }
    }
  });
  if (otherwise !== undefined) {
    entries.push({ origin: 'otherwise', guard: [], ...outcomeOf(otherwise) });
    for (const row of cells) for (const cell of row) if (cell.length === 0) cell.push(entries.length - 1);
  }

  const rows = [];
  const byRow = [];
  eventTypes.forEach((event, e) => {
    const grouped = new Map();
    states.forEach((state, s) => {
      for (const index of cells[e][s]) {
        if (!grouped.has(index)) grouped.set(index, []);
        grouped.get(index).push(state);
      }
    });
    for (const [index, inStatuses] of grouped) {
      const { origin, guard, answer, summary, cases } = entries[index];
      rows.push({ event, statuses: inStatuses, guard, answer, summary, rule: origin });
      byRow.push(cases ?? [['', summary]]);
    }
  });
  return { ruleSet: report.ruleSet, rows, report, cases: byRow };
}

/** The same table as Markdown, laid out as RuleSet#tableMarkdown() lays it out: a line per case. */
function tableMarkdownOf({ ruleSet, rows, cases }) {
  const lines = [
    `Rule set \`${ruleSet.id}\` v${ruleSet.version} (\`${ruleSet.hash}\`)`,
    '',
    '| Event | In status | Guard | When | Answer |',
    '| --- | --- | --- | --- | --- |',
  ];
  rows.forEach((row, i) => {
    cases[i].forEach(([when, answer], c) => {
      lines.push(
        c === 0
          ? `| ${row.event} | ${row.statuses.join(', ')} | ${row.guard.join(', ')} | ${when} | ${answer} |`
          : `| | | | ${when} | ${answer} |`,
      );
    });
  });
  return `${lines.join('\n')}\n`;
}

module.exports = { tableOfDefinition, tableMarkdownOf };
