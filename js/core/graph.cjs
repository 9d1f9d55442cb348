'use strict';
// A rule set's state diagram, drawn from the table the core reports for it
// (RuleSet#table): statuses as nodes, one edge per status a rule answers in
// and per outcome it can give, labelled by the event, the case that selects
// it and the operations it emits. Nothing here decides: the edges are the
// core's rows, laid out as Mermaid (GitHub renders it) or Graphviz DOT.

const { IdemflowError } = require('./errors.cjs');
const { optionsOf } = require('./options.cjs');

const NONE = '(none)';
const FORMATS = ['mermaid', 'dot'];

function invalid(field, reason) {
  return new IdemflowError('INVALID_ARGUMENT', `graph: ${reason}`, { disposition: 'fatal', details: { field, reason } });
}

/** A condition as the table writes it: `[eventField, op, recordedField]`, `{ other: [types] }` or `{ emitted: name }`. */
function conditionText(condition) {
  if (Array.isArray(condition)) return `${condition[0]} ${condition[1]} recorded ${condition[2]}`;
  if (Array.isArray(condition?.other)) return `another fact's last event is ${condition.other.join(' or ')}`;
  if (typeof condition?.emitted === 'string') return `this fact emitted ${condition.emitted}`;
  return JSON.stringify(condition);
}

/** Every (answer, condition) a row can give: its one answer, `when`/`then`/`else`, or each of its cases. */
function answersOf(row) {
  const { answer } = row;
  if (Array.isArray(answer.cases)) {
    return answer.cases.map((c) => ({ then: c.then, when: (c.when ?? []).map(conditionText).join(' and ') || 'else' }));
  }
  if (answer.when !== undefined && answer.then !== undefined) {
    return [
      { then: answer.then, when: conditionText(answer.when) },
      { then: answer.else, when: 'else' },
    ];
  }
  return [{ then: answer, when: '' }];
}

/**
 * The edges of the diagram: { from, to, event, when, outcome, emits, error }.
 * `all` adds the answers that change nothing (already-applied, stale, errors) as self-loops.
 */
function edgesOf(rows, all) {
  const edges = [];
  for (const row of rows) {
    for (const { then, when } of answersOf(row)) {
      const outcome = then.outcome ?? null;
      if (outcome !== 'applied' && !all) continue;
      const emits = (then.emit ?? []).map((operation) => operation.type);
      for (const from of row.statuses) {
        const to = outcome === 'applied' ? (then.to ?? from) : from;
        edges.push({ from, to, event: row.event, when, outcome, emits, error: then.error ?? null, disposition: then.disposition ?? null });
      }
    }
  }
  return edges;
}

function labelOf(edge, detail) {
  let label = edge.event;
  if (edge.when && detail) label += ` [${edge.when}]`;
  if (edge.outcome !== 'applied') label += edge.error ? `: ${edge.error} (${edge.disposition})` : `: ${edge.outcome}`;
  if (edge.emits.length > 0) label += ` / ${edge.emits.join(', ')}`;
  return label;
}

/** One edge per pair of statuses, labelled by every distinct label of the edges between them (` | ` apart). */
function merged(edges, detail) {
  const pairs = new Map();
  for (const edge of edges) {
    const key = JSON.stringify([edge.from, edge.to]);
    const pair = pairs.get(key) ?? { from: edge.from, to: edge.to, labels: [] };
    const label = labelOf(edge, detail);
    if (!pair.labels.includes(label)) pair.labels.push(label);
    pairs.set(key, pair);
  }
  return [...pairs.values()].map((pair) => ({ from: pair.from, to: pair.to, label: pair.labels.join(' | ') }));
}

function statusesOf(edges) {
  const statuses = [];
  for (const edge of edges) for (const status of [edge.from, edge.to]) if (!statuses.includes(status)) statuses.push(status);
  return statuses;
}

function mermaid(ruleSet, edges) {
  const ids = new Map();
  statusesOf(edges).forEach((status, i) => {
    ids.set(status, status === NONE ? '[*]' : `s${i}`);
  });
  // Mermaid reads ':' and ';' in a transition label as syntax, and '#' starts an entity.
  const entities = (text) => text.replace(/[#;:]/g, (c) => `#${c.charCodeAt(0)};`);
  const lines = ['stateDiagram-v2', `  %% ${ruleSet.id} v${ruleSet.version} (${ruleSet.hash})`];
  for (const [status, id] of ids) if (status !== NONE) lines.push(`  state "${status.replace(/"/g, '#quot;')}" as ${id}`);
  for (const edge of edges) lines.push(`  ${ids.get(edge.from)} --> ${ids.get(edge.to)} : ${entities(edge.label)}`);
  return `${lines.join('\n')}\n`;
}

function dot(ruleSet, edges) {
  const quote = (text) => `"${text.replace(/["\\]/g, '\\$&')}"`;
  const lines = [`digraph ${quote(`${ruleSet.id} v${ruleSet.version}`)} {`, '  rankdir=LR;', '  node [shape=box, style=rounded];'];
  for (const status of statusesOf(edges)) {
    lines.push(status === NONE ? `  ${quote(NONE)} [shape=point, label=""];` : `  ${quote(status)};`);
  }
  for (const edge of edges) lines.push(`  ${quote(edge.from)} -> ${quote(edge.to)} [label=${quote(edge.label)}];`);
  lines.push('}');
  return `${lines.join('\n')}\n`;
}

/**
 * The diagram of `ruleSet` as text. Options: `format` ('mermaid', the default,
 * or 'dot'); `all` (false: only the answers that apply; true: every answer, the
 * ones that change nothing as self-loops); `conditions` (false: one edge per
 * pair of statuses, labelled by event and emitted operations; true: each
 * label also names the case that selects it).
 */
function ruleSetGraph(ruleSet, options = {}) {
  const given = optionsOf(options, ['format', 'all', 'conditions'], 'graph');
  const format = given.format ?? 'mermaid';
  if (!FORMATS.includes(format)) throw invalid('format', `format must be one of ${FORMATS.join(', ')}`);
  for (const flag of ['all', 'conditions']) {
    if (given[flag] !== undefined && typeof given[flag] !== 'boolean') throw invalid(flag, `${flag} must be a boolean`);
  }
  const edges = merged(edgesOf(ruleSet.table(), given.all === true), given.conditions === true);
  return format === 'dot' ? dot(ruleSet, edges) : mermaid(ruleSet, edges);
}

module.exports = { ruleSetGraph, FORMATS };
