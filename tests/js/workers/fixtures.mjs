// What several test files share: the seed article's event, the smallest rule
// set (one shipment per order), and a call's outcome as a value.
import { IdemflowError } from 'idemflow';

/**
 * The chain-deposit article's confirmation. Its swap is in `deposit`: the
 * watcher's detection of the deposit was its observation 1, so the
 * confirmation carries `sequence` 2 (deposit-swap v2 ignores the field; v3
 * requires it).
 */
export const SEED_EVENT = Object.freeze({
  eventId: 'chain-watcher:event-001',
  workflowId: 'swap-42',
  type: 'DEPOSIT_CONFIRMED',
  depositRef: 'btc-mainnet:tx-abc:vout-0',
  amountUnits: '12500000',
  sequence: 2,
});

/**
 * A deposit-swap v3 swap in `deposit`: the chain watcher's detection of one
 * deposit (its observation `sequence`, 1 by default) applied. Before the
 * exchange v3 keeps a deposit only in the workflow's `deposits` map, keyed by
 * depositRef, its latest word (`event`), amount and number; nothing about it
 * on the swap itself. `rest`: other workflow fields (an expectedUnits, say).
 */
export function detectedSwap({ id, revision, depositRef, amountUnits, sequence = 1, ...rest }) {
  return { id, status: 'deposit', revision, ...rest, deposits: { [depositRef]: { event: 'DEPOSIT_DETECTED', amountUnits, sequence } } };
}

/**
 * The seed article's swap waiting for its confirmation, as the default rule
 * set (deposit-swap v3) stores it: the watcher's detection put it in
 * `deposit` and recorded that deposit, observation `sequence` 1, in
 * `deposits`, so SEED_EVENT (sequence 2) is newer and applies. Once SEED_EVENT
 * applied it is in `exchange`, revision 4, recording the exchanged deposit
 * (depositRef, amountUnits, sequence 2) on the swap and its entry in
 * `deposits` as confirmed. The article's own workflow (deposit-swap v1,
 * which processDepositConfirmed runs) has no sequence and no map.
 */
/** Swap `i` of a numbered set, detected: its deposit `btc:tx-<i>:vout-0` of 1000 + i units. */
export const numberedSwap = (i) =>
  detectedSwap({ id: `swap-${i}`, revision: 1, depositRef: `btc:tx-${i}:vout-0`, amountUnits: String(1000 + i) });

/** The confirmation of numbered swap `i`'s deposit (sequence 2): applied, it emits one START_EXCHANGE. */
export const numberedConfirmation = (i, eventId = `confirm-${i}`) => ({
  eventId,
  workflowId: `swap-${i}`,
  type: 'DEPOSIT_CONFIRMED',
  depositRef: `btc:tx-${i}:vout-0`,
  amountUnits: String(1000 + i),
  sequence: 2,
});

export const SEED_WORKFLOW = Object.freeze(
  detectedSwap({
    id: 'swap-42',
    revision: 3,
    depositRef: 'btc-mainnet:tx-abc:vout-0',
    amountUnits: '12500000',
  }),
);

/**
 * A deposit-swap v3 swap once the confirmation (observation `sequence`, 2 by
 * default) of its one deposit applied: exchanging that deposit, which v3 now
 * records on the swap (the deposit it acts on) with the confirmation's
 * number, its entry in `deposits` confirmed.
 */
export function exchangingSwap({ id, revision, depositRef, amountUnits, sequence = 2, ...rest }) {
  return {
    id,
    status: 'exchange',
    revision,
    ...rest,
    depositRef,
    amountUnits,
    sequence,
    deposits: { [depositRef]: { event: 'DEPOSIT_CONFIRMED', amountUnits, sequence } },
  };
}

/** SEED_WORKFLOW once SEED_EVENT applied. */
export const SEED_EXCHANGING = Object.freeze(
  exchangingSwap({
    id: 'swap-42',
    revision: 4,
    depositRef: SEED_EVENT.depositRef,
    amountUnits: SEED_EVENT.amountUnits,
  }),
);

/**
 * A chain watcher numbers the deposit events it emits about one depositRef
 * with `sequence`, 1, 2, 3 … in the order it emits them (a re-publication
 * under another event id keeps its number): deposit-swap v3 requires the
 * field, v2 ignores it. WATCHER_SEQUENCE is the numbering of one watcher that
 * detected a deposit, confirmed it, then saw it reversed; WATCHED_TYPES the
 * event types it numbers.
 */
export const WATCHER_SEQUENCE = Object.freeze({ DEPOSIT_DETECTED: 1, DEPOSIT_CONFIRMED: 2, DEPOSIT_REVERSED: 3 });
export const WATCHED_TYPES = Object.freeze(Object.keys(WATCHER_SEQUENCE));

/** A definition of one shipment per order (order-shipment's shape) under `id`, a fresh copy to change. */
export function shipmentDefinition(id) {
  return {
    id,
    version: 1,
    statuses: [{ name: 'shipping', terminal: true }],
    events: [{ type: 'SHIPMENT_REQUESTED', fields: [] }],
    rules: [
      {
        on: 'SHIPMENT_REQUESTED',
        in: '(none)',
        then: { outcome: 'applied', to: 'shipping', emit: [{ type: 'CREATE_SHIPMENT', id: 'create-shipment:{workflowId}' }] },
      },
      { on: 'SHIPMENT_REQUESTED', in: 'shipping', then: { outcome: 'already-applied' } },
    ],
  };
}

/** What `promise` resolves to, or `{ error }` for an IdemflowError (anything else is rethrown). */
export async function outcomeOf(promise) {
  try {
    return await promise;
  } catch (error) {
    if (!(error instanceof IdemflowError)) throw error;
    return { error };
  }
}
