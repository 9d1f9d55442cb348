'use strict';
// The three records every store keeps, in the domain's names: a workflow
// ({id, status, revision, data}), an inbox receipt and an outbox operation.
// What a host hands in is checked here before anything is written; what a
// store hands back is read here field by field, so every store reads alike.
// Stores keep records their own way (SQL rows, documents, Maps) and convert
// at their edge; nothing here knows a database.

const { IdemflowError } = require('../core/errors.cjs');
const { optionsOf } = require('../core/options.cjs');
const { resolveRuleSet } = require('../core/rules.cjs');
const { call } = require('../core/wasm.cjs');
const { outputOf } = require('../host/applied.cjs');
const { invalidArgument } = require('./errors.cjs');

const RESERVED_FIELDS = new Set(['id', 'status', 'revision']);
// The shape of a rule set's field names; it keeps them safe in JSON paths and MongoDB dotted paths.
const FIELD_NAME = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;
const isCount = (value) => Number.isSafeInteger(value) && value >= 1; // a count field's value (the core checks each field's kind)
/**
 * A rule set's facts map (`facts.name`): a plain JSON object of fact entries.
 * The store keeps it as written; the core checks its entries when it reads it.
 */
const isFactsMap = (value) =>
  value !== null &&
  typeof value === 'object' &&
  !Array.isArray(value) &&
  (Object.getPrototypeOf(value) === Object.prototype || Object.getPrototypeOf(value) === null);

function checkText(value, field) {
  if (typeof value !== 'string' || value.length === 0) {
    throw invalidArgument(`${field} must be a non-empty string`, { field, reason: 'not a non-empty string' });
  }
  if (!value.isWellFormed()) {
    throw invalidArgument(`${field} must be well-formed Unicode (it contains a lone surrogate)`, { field, reason: 'lone surrogate' });
  }
  return value;
}

/**
 * A workflow a host wants stored, checked: `{id, status, revision, data}`
 * with the recorded fields in `data`. Recorded fields are strings (amounts
 * are decimal strings) or counts; null or undefined leaves a field out.
 * With `ruleSet` (putWorkflow's option), its facts map is checked too
 * (checkFacts). Throws INVALID_ARGUMENT before anything is written.
 */
function workflowToStore(workflow, ruleSet = null) {
  if (workflow === null || typeof workflow !== 'object' || Array.isArray(workflow)) {
    throw invalidArgument('a workflow must be an object {id, status, revision, ...fields}', { reason: 'not an object' });
  }
  const id = checkText(workflow.id, 'id');
  const status = checkText(workflow.status, 'status');
  const { revision } = workflow;
  if (!Number.isSafeInteger(revision) || revision < 0) {
    throw invalidArgument('revision must be a whole number from 0 to 2^53 - 1', {
      field: 'revision',
      workflowId: id,
      reason: 'not a safe integer',
    });
  }
  const data = {};
  for (const [field, value] of Object.entries(workflow)) {
    if (RESERVED_FIELDS.has(field) || value === null || value === undefined) continue;
    if (!FIELD_NAME.test(field)) {
      throw invalidArgument(`workflow field ${JSON.stringify(field)} is not a field name (a letter, then letters, digits, '_' or '-')`, {
        field,
        workflowId: id,
        reason: 'not a field name',
      });
    }
    if (typeof value !== 'string' && !isCount(value) && !isFactsMap(value)) {
      throw invalidArgument(
        `workflow field ${field} must be a string (amounts are decimal strings), a count (a safe integer >= 1) or a facts map (an object), not ${typeof value === 'number' ? value : typeof value}`,
        {
          field,
          workflowId: id,
          reason: 'not a string or a count',
        },
      );
    }
    data[field] = typeof value === 'string' ? checkText(value, field) : isFactsMap(value) ? structuredClone(value) : value;
  }
  if (ruleSet !== null) checkFacts({ ...data, id }, ruleSet);
  return { id, status, revision, data };
}

/** The facts field's name of a compiled rule set (its layout's `facts.name`), or null; read once per rule set. */
const factsNames = new WeakMap();
function factsNameOf(compiled) {
  let name = factsNames.get(compiled);
  if (name === undefined) {
    name = JSON.parse(compiled.layoutJson()).facts?.name ?? null;
    factsNames.set(compiled, name);
  }
  return name;
}

/**
 * putWorkflow's options, read once: `{ ruleSet }` (a RuleSet or a built-in
 * name), the rule set whose facts map the workflow holds; without one the
 * default processEvent decides with (deposit-swap), so the map a decision
 * will read is checked when it is written.
 */
function putOptionsOf(options) {
  const { ruleSet } = optionsOf(options, ['ruleSet'], 'putWorkflow');
  return resolveRuleSet(ruleSet);
}

/**
 * Throws INVALID_ARGUMENT (details.field naming the field, or the entry and
 * its member) unless the workflow's facts map under `ruleSet` is one a
 * decision can read: an object (never its JSON text as a string) that the
 * core checks as it checks what it reads (its entries, their members, the
 * bounds on entries and bytes). Absent or null is no map.
 */
function checkFacts(workflow, ruleSet) {
  const name = factsNameOf(ruleSet.compiled);
  if (name === null) return;
  const value = workflow[name];
  if (value === undefined || value === null) return;
  const id = workflow.id;
  if (!isFactsMap(value)) {
    const what = typeof value === 'string' ? 'a string (JSON text is not a facts map)' : typeof value;
    throw invalidArgument(
      `workflow field ${name} is the facts map of rule set ${ruleSet.id}: a plain object of fact entries, not ${what}`,
      {
        field: name,
        workflowId: id,
        reason: typeof value === 'string' ? 'facts map stored as a string' : 'not a facts map',
      },
    );
  }
  try {
    call(() => ruleSet.compiled.checkFacts(JSON.stringify(value)));
  } catch (error) {
    if (!(error instanceof IdemflowError) || error.code !== 'INVALID_RECORD') throw error;
    const field = error.details.field ?? name;
    throw invalidArgument(`workflow ${id}: ${field} ${error.details.reason}`, {
      field,
      workflowId: id,
      reason: error.details.reason,
    });
  }
}

/**
 * Splits a WorkflowWrite's `set` into the status and revision columns and a
 * merge patch for the recorded fields (RFC 7396: a null removes the field).
 */
function workflowPatch(write) {
  if (write === null || typeof write !== 'object' || write.set === null || typeof write.set !== 'object') {
    throw invalidArgument('a workflow write must be {id, expect, set}', { reason: 'not a workflow write' });
  }
  const id = checkText(write.id, 'id');
  const { status, revision, ...fields } = write.set;
  checkText(status, 'set.status');
  if (!Number.isSafeInteger(revision) || revision < 0) {
    throw invalidArgument('set.revision must be a whole number from 0 to 2^53 - 1', {
      field: 'set.revision',
      workflowId: id,
      reason: 'not a safe integer',
    });
  }
  for (const [field, value] of Object.entries(fields)) {
    if (!FIELD_NAME.test(field)) {
      throw invalidArgument(`set.${field} is not a field name (a letter, then letters, digits, '_' or '-')`, {
        field: `set.${field}`,
        workflowId: id,
        reason: 'not a field name',
      });
    }
    if (value !== null && typeof value !== 'string' && !isCount(value) && !isFactsMap(value)) {
      throw invalidArgument(`set.${field} must be a string, a count, a facts map (an object) or null`, {
        field: `set.${field}`,
        workflowId: id,
        reason: 'not a string or a count',
      });
    }
  }
  return decidedWorkflowPatch(write);
}

function invalidRecord(record, field, reason, id) {
  const which = typeof id === 'string' ? ` ${id}` : '';
  return new IdemflowError('INVALID_RECORD', `stored ${record}${which} is invalid: ${field} ${reason}`, {
    details: { record, field, reason, ...(typeof id === 'string' ? { id } : {}) },
  });
}

// Readers of stored records. A record is read field by field, each with what
// it must hold; a value that does not fit is INVALID_RECORD naming the field
// by its stored name (the column name, docs/adapters.md), never a guess (a
// guessed revision turns into a compare-and-set that can never match,
// retried forever). Objects are rebuilt from their own keys, so nothing in
// stored JSON (a "__proto__" key) reaches a prototype.

const CANONICAL_WHOLE = /^(0|[1-9][0-9]{0,15})$/;
const MAX_SAFE_BIGINT = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * An exact whole number from 0 to 2^53 - 1: a number, a bigint, or the
 * canonical decimal text some drivers hand back for BIGINT (pg, mysql2 with
 * bigNumberStrings). '', ' 3', '3e0', '0x3', 3.5 and -1 are refused.
 */
function wholeValue(value, record, name, id, text = true) {
  let number = Number.NaN;
  if (typeof value === 'number') number = value;
  else if (typeof value === 'bigint') number = value >= 0n && value <= MAX_SAFE_BIGINT ? Number(value) : Number.NaN;
  else if (text && typeof value === 'string' && CANONICAL_WHOLE.test(value)) number = Number(value);
  if (!Number.isSafeInteger(number) || number < 0) {
    throw invalidRecord(record, name, `is not a whole number from 0 to 2^53 - 1 (${describeValue(value)})`, id);
  }
  return number === 0 ? 0 : number; // not -0
}

/** wholeValue, or null for a missing value. */
function optionalWholeValue(value, record, name, id) {
  return value === null || value === undefined ? null : wholeValue(value, record, name, id);
}

function textValue(value, record, name, id) {
  if (typeof value !== 'string') throw invalidRecord(record, name, `is not text (${describeValue(value)})`, id);
  return value;
}

function optionalTextValue(value, record, name, id) {
  return value === null || value === undefined ? null : textValue(value, record, name, id);
}

/** What a refused value was, short and safe to put in a message. */
function describeValue(value) {
  if (typeof value === 'string') return value.length > 40 ? `text of ${value.length} characters` : JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') return `${typeof value} ${String(value)}`;
  if (value === null || value === undefined) return String(value);
  return Array.isArray(value) ? 'an array' : typeof value;
}

/**
 * A copy of parsed JSON built from own keys only: a "__proto__" key is
 * refused (it can only have been written by hand), arrays stay arrays.
 */
function ownJson(value, record, name, id, depth = 0) {
  if (value === null || typeof value !== 'object') return value;
  if (depth > 64) throw invalidRecord(record, name, 'is nested too deeply', id);
  if (Array.isArray(value)) return value.map((item) => ownJson(item, record, name, id, depth + 1));
  const copy = {};
  for (const key of Object.keys(value)) {
    if (key === '__proto__') throw invalidRecord(record, name, 'has a "__proto__" key', id);
    copy[key] = ownJson(value[key], record, name, id, depth + 1);
  }
  return copy;
}

/** A JSON object (text, or an object a driver already parsed), copied by own keys. */
function objectValue(value, record, name, id) {
  let parsed = value;
  if (typeof value === 'string') {
    try {
      parsed = JSON.parse(value);
    } catch {
      throw invalidRecord(record, name, 'is not JSON', id);
    }
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw invalidRecord(record, name, 'is not a JSON object', id);
  return ownJson(parsed, record, name, id);
}

/** objectValue, or null for a missing value (a record written before the field existed). */
function optionalObjectValue(value, record, name, id) {
  return value === null || value === undefined ? null : objectValue(value, record, name, id);
}

const OPERATION_STATUSES = new Set(['pending', 'claimed', 'done', 'dead']);

function statusValue(value, record, name, id) {
  const status = textValue(value, record, name, id);
  if (!OPERATION_STATUSES.has(status))
    throw invalidRecord(record, name, `is not pending, claimed, done or dead (${describeValue(status)})`, id);
  return status;
}

/**
 * The fields of each record: [field, stored name, reader]. The stored name is
 * what INVALID_RECORD calls a field, and the SQL stores' column (sql/columns.cjs).
 */
const RECORD_FIELDS = Object.freeze({
  workflow: Object.freeze([
    ['id', 'id', textValue],
    ['status', 'status', textValue],
    ['revision', 'revision', wholeValue],
    ['data', 'data', objectValue],
  ]),
  receipt: Object.freeze([
    ['eventId', 'event_id', textValue],
    ['fingerprint', 'fingerprint', textValue],
    ['workflowId', 'workflow_id', textValue],
    ['eventType', 'event_type', textValue],
    ['outcome', 'outcome', textValue],
    ['ruleSetId', 'rule_set_id', optionalTextValue],
    ['ruleSetVersion', 'rule_set_version', wholeValue],
    ['ruleSetHash', 'rule_set_hash', optionalTextValue],
    ['recordedAt', 'recorded_at', wholeValue],
    // Last: it is the column migrate() adds to a table made before it.
    ['result', 'result', optionalObjectValue],
  ]),
  operation: Object.freeze([
    ['id', 'id', textValue],
    ['type', 'type', textValue],
    ['workflowId', 'workflow_id', textValue],
    ['eventId', 'event_id', textValue],
    ['payload', 'payload', objectValue],
    ['status', 'status', statusValue],
    ['attempts', 'attempts', wholeValue],
    ['nextAttemptAt', 'next_attempt_at', wholeValue],
    ['leaseOwner', 'lease_owner', optionalTextValue],
    ['leaseExpiresAt', 'lease_expires_at', optionalWholeValue],
    ['fencingToken', 'fencing_token', wholeValue],
    ['lastError', 'last_error', optionalTextValue],
    ['createdAt', 'created_at', wholeValue],
    ['updatedAt', 'updated_at', wholeValue],
    // Correlation beside the payload: the host's metadata and the W3C traceparent of the delivery that wrote it.
    ['metadata', 'metadata', optionalObjectValue],
    ['traceContext', 'trace_context', optionalTextValue],
  ]),
});

const FIELD_BY_NAME = new Map(
  Object.values(RECORD_FIELDS)
    .flat()
    .map(([field, name]) => [name, field]),
);

/** The domain field a stored name stands for (`event_id` → `eventId`); the name itself when it is none. */
function fieldOfName(name) {
  return FIELD_BY_NAME.get(name) ?? name;
}

/**
 * `{id, status, revision, ...fields}` from a stored workflow record
 * `{id, status, revision, data}` (data: an object or JSON text). The recorded
 * fields must be what a store writes: field names holding strings or counts.
 * `numbers`: the store holds numbers as numbers (MongoDB, memory), so a
 * revision held as text, even '3', is damage: a compare-and-set on the number
 * would never match it.
 */
function workflowFromStore(record, { numbers = false } = {}) {
  if (!record) return null;
  const id = textValue(record.id, 'workflow', 'id');
  const revision = wholeValue(record.revision, 'workflow', 'revision', id, !numbers);
  const workflow = { id, status: textValue(record.status, 'workflow', 'status', id), revision };
  const data = objectValue(record.data, 'workflow', 'data', id);
  for (const field of Object.keys(data)) {
    if (RESERVED_FIELDS.has(field)) continue;
    if (!FIELD_NAME.test(field)) throw invalidRecord('workflow', `data.${field.slice(0, 64)}`, 'is not a field name', id);
    if (typeof data[field] !== 'string' && !isCount(data[field]) && !isFactsMap(data[field]))
      throw invalidRecord('workflow', `data.${field}`, `is not a string, a count or a facts map (${describeValue(data[field])})`, id);
    workflow[field] = data[field];
  }
  return workflow;
}

/**
 * What a decision reads of a stored receipt: its key, the fingerprint it
 * compares and what the first delivery produced (outcome, recordedAt,
 * result). SQL stores read only these columns for processEvent and processBatch.
 */
const DECISION_FIELDS = Object.freeze(['eventId', 'fingerprint', 'outcome', 'recordedAt', 'result']);

/** The decision's part of a stored receipt record, each field read as receiptFromStore reads it. */
function decisionReceiptFromStore(record) {
  if (!record) return null;
  const eventId = textValue(record.eventId, 'receipt', 'event_id');
  const receipt = { eventId };
  for (const [field, name, reader] of RECORD_FIELDS.receipt) {
    if (field !== 'eventId' && DECISION_FIELDS.includes(field)) receipt[field] = reader(record[field], 'receipt', name, eventId);
  }
  return receipt;
}

/** A receipt as the API gives it (`ruleSet` nested) from a stored receipt record (as receiptToStore writes it). */
function receiptFromStore(record) {
  if (!record) return null;
  const eventId = textValue(record.eventId, 'receipt', 'event_id');
  const read = {};
  for (const [field, name, reader] of RECORD_FIELDS.receipt) {
    if (field === 'eventId' || field === 'ruleSetVersion' || field === 'ruleSetHash') continue;
    read[field] = reader(record[field], 'receipt', name, eventId);
  }
  return {
    eventId,
    fingerprint: read.fingerprint,
    workflowId: read.workflowId,
    eventType: read.eventType,
    outcome: read.outcome,
    ruleSet:
      read.ruleSetId === null
        ? null
        : {
            id: read.ruleSetId,
            version: wholeValue(record.ruleSetVersion, 'receipt', 'rule_set_version', eventId),
            hash: optionalTextValue(record.ruleSetHash, 'receipt', 'rule_set_hash', eventId),
          },
    recordedAt: read.recordedAt,
    result: read.result,
  };
}

/**
 * A write set's receipt result, checked: `{operationIds, status, revision}`
 * as the core writes it, or null when a host hands in a receipt without one.
 */
function resultToStore(result) {
  if (result === undefined || result === null) return null;
  const bad = (reason) => invalidArgument(`receipt result ${reason}`, { field: 'result', reason });
  if (typeof result !== 'object' || Array.isArray(result)) throw bad('must be an object {operationIds, status, revision}');
  const { operationIds, status = null, revision = null, output } = result;
  if (!Array.isArray(operationIds)) throw bad('operationIds must be an array');
  operationIds.forEach((id, i) => checkText(id, `result.operationIds[${i}]`));
  if (status !== null) checkText(status, 'result.status');
  if (revision !== null && (!Number.isSafeInteger(revision) || revision < 0)) throw bad('revision must be a whole number or null');
  const stored = { operationIds: [...operationIds], status, revision };
  if (output !== undefined) stored.output = outputOf(output);
  return stored;
}

/** A new receipt's record from its parts: its fields flat (ruleSetId, ruleSetVersion, ruleSetHash), stamped `now`. */
function newReceipt({ eventId, fingerprint, workflowId, eventType, outcome, ruleSet, result }, now) {
  return {
    eventId,
    fingerprint,
    workflowId,
    eventType,
    outcome,
    ruleSetId: ruleSet ? ruleSet.id : null,
    ruleSetVersion: ruleSet ? ruleSet.version : null,
    ruleSetHash: ruleSet ? ruleSet.hash : null,
    recordedAt: now,
    result,
  };
}

/** A new receipt's record, checked. */
function receiptToStore(receipt, now) {
  if (receipt === null || typeof receipt !== 'object') {
    throw invalidArgument('a receipt must be an object', { reason: 'not a receipt' });
  }
  return newReceipt(
    {
      eventId: checkText(receipt.eventId, 'eventId'),
      fingerprint: checkText(receipt.fingerprint, 'fingerprint'),
      workflowId: checkText(receipt.workflowId, 'workflowId'),
      eventType: checkText(receipt.eventType, 'eventType'),
      outcome: checkText(receipt.outcome, 'outcome'),
      ruleSet: receipt.ruleSet ?? null,
      result: resultToStore(receipt.result),
    },
    now,
  );
}

// The records of a write set the core made (processEvent): of the shapes the
// core writes, so stored as they are, without the checks above, which are
// for write sets a host hands in.

/**
 * receiptToStore for a receipt the core made, with the host's output
 * (onApplied's, checked: `output`, or the one processBatch put in its
 * result) when there is one.
 */
function decidedReceiptToStore(receipt, now, output = receipt.result?.output) {
  const { result } = receipt;
  const kept = result ? { operationIds: [...result.operationIds], status: result.status, revision: result.revision } : null;
  if (kept !== null && output !== undefined) kept.output = output;
  return newReceipt({ ...receipt, result: kept }, now);
}

/** operationToStore for an operation the core made (with the host's metadata and trace context, checked by processEvent). */
function decidedOperationToStore(operation, now) {
  return pendingOperation({ ...operation, metadata: operation.metadata ?? null, traceContext: operation.traceContext ?? null }, now);
}

/** workflowPatch for a workflow write the core made (and for one workflowPatch has checked). */
function decidedWorkflowPatch(write) {
  const { status, revision } = write.set;
  const patch = {};
  const removed = [];
  const kept = {};
  // Own fields only: an inherited one (a polluted Object.prototype) is not the write's.
  for (const [field, value] of Object.entries(write.set)) {
    if (field === 'status' || field === 'revision') continue;
    patch[field] = value;
    if (value === null) removed.push(field);
    else kept[field] = value;
  }
  return { id: write.id, status, revision, expect: write.expect ?? null, patch, removed, kept };
}

/** A new outbox operation's record from its parts: pending, due now. */
function pendingOperation({ id, type, workflowId, eventId, payload, metadata, traceContext }, now) {
  return {
    id,
    type,
    workflowId,
    eventId,
    payload,
    status: 'pending',
    attempts: 0,
    nextAttemptAt: now,
    leaseOwner: null,
    leaseExpiresAt: null,
    fencingToken: 0,
    lastError: null,
    createdAt: now,
    updatedAt: now,
    metadata,
    traceContext,
  };
}

/** A new outbox operation's record, checked. */
function operationToStore(operation, now) {
  if (operation === null || typeof operation !== 'object') {
    throw invalidArgument('an outbox operation must be an object', { reason: 'not an operation' });
  }
  const payload = operation.payload ?? {};
  if (payload === null || typeof payload !== 'object' || Array.isArray(payload)) {
    throw invalidArgument('operation payload must be an object', { field: 'payload', operationId: operation.id, reason: 'not an object' });
  }
  const metadata = operation.metadata ?? null;
  if (metadata !== null && (typeof metadata !== 'object' || Array.isArray(metadata))) {
    throw invalidArgument('operation metadata must be an object', {
      field: 'metadata',
      operationId: operation.id,
      reason: 'not an object',
    });
  }
  const traceContext = operation.traceContext ?? null;
  if (traceContext !== null) checkText(traceContext, 'traceContext');
  return pendingOperation(
    {
      id: checkText(operation.id, 'id'),
      type: checkText(operation.type, 'type'),
      workflowId: checkText(operation.workflowId, 'workflowId'),
      eventId: checkText(operation.eventId, 'eventId'),
      payload: { ...payload },
      metadata: metadata === null ? null : { ...metadata },
      traceContext,
    },
    now,
  );
}

/** An operation from a stored record; INVALID_RECORD naming the first field that cannot be read. */
function operationFromStore(record) {
  if (!record) return null;
  const id = textValue(record.id, 'operation', 'id');
  const operation = { id };
  for (const [field, name, read] of RECORD_FIELDS.operation) {
    if (field !== 'id') operation[field] = read(record[field], 'operation', name, id);
  }
  return operation;
}

/**
 * An operation as an operator sees it (getOperation, listOperations): every
 * field that can be read, null for those that cannot, and `unreadable`
 * naming them (only when there are some). One bad record must not hide the
 * others, and a quarantined one must show in the dead list with its reason.
 */
function operationView(record) {
  if (!record) return null;
  const unreadable = [];
  const attempt = (field, name, read, id) => {
    try {
      return read(record[field], 'operation', name, id);
    } catch (error) {
      if (!(error instanceof IdemflowError) || error.code !== 'INVALID_RECORD') throw error;
      unreadable.push(field);
      return null;
    }
  };
  const id = attempt('id', 'id', textValue);
  const operation = { id };
  for (const [field, name, read] of RECORD_FIELDS.operation) {
    if (field !== 'id') operation[field] = attempt(field, name, read, id ?? undefined);
  }
  if (unreadable.length > 0) operation.unreadable = unreadable;
  return operation;
}

module.exports = {
  RECORD_FIELDS,
  OPERATION_STATUSES,
  fieldOfName,
  checkText,
  workflowToStore,
  putOptionsOf,
  workflowPatch,
  workflowFromStore,
  receiptToStore,
  decidedReceiptToStore,
  decidedOperationToStore,
  decidedWorkflowPatch,
  receiptFromStore,
  DECISION_FIELDS,
  decisionReceiptFromStore,
  operationToStore,
  operationFromStore,
  operationView,
};
