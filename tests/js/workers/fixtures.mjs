// What several test files share: the seed article's event, the smallest rule
// set (one shipment per order), and a call's outcome as a value.
import { IdemflowError } from 'idemflow';

/** The chain-deposit article's confirmation. */
export const SEED_EVENT = Object.freeze({
  eventId: 'chain-watcher:event-001',
  workflowId: 'swap-42',
  type: 'DEPOSIT_CONFIRMED',
  depositRef: 'btc-mainnet:tx-abc:vout-0',
  amountUnits: '12500000',
});

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
