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
 * The seed article's swap waiting for its confirmation, as the default rule
 * set (deposit-swap v3) stores it: the watcher's detection put it in
 * `deposit` and recorded that observation's number, `sequence` 1, so
 * SEED_EVENT (sequence 2) is newer and applies. Once SEED_EVENT applied it is
 * in `exchange`, revision 4, recording sequence 2. The article's own workflow
 * (deposit-swap v1, which processDepositConfirmed runs) has no sequence.
 */
export const SEED_WORKFLOW = Object.freeze({
  id: 'swap-42',
  status: 'deposit',
  revision: 3,
  depositRef: 'btc-mainnet:tx-abc:vout-0',
  amountUnits: '12500000',
  sequence: 1,
});

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
      { on: 'SHIPMENT_REQUESTED', in: '(none)',
        then: { outcome: 'applied', to: 'shipping', emit: [{ type: 'CREATE_SHIPMENT', id: 'create-shipment:{workflowId}' }] } },
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
