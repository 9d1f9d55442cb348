// A worker for the own-writes kill test: it delivers one SHIPMENT_REQUESTED
// with an onApplied that writes a shipment row through tx.client. With
// IDEMFLOW_HANG_IN_CALLBACK it reports 'inside' once the row is written and
// waits there (the test SIGKILLs it); otherwise it reports the outcome.
import { RuleSet } from 'idemflow';
import { openStore } from './backends.mjs';

const { kind, table, eventId, orderId, ...options } = JSON.parse(process.env.IDEMFLOW_OWN_WRITES);
const hang = process.env.IDEMFLOW_HANG_IN_CALLBACK === '1';
const helper = await openStore(kind, options);
const insert =
  kind === 'pg'
    ? (tx) => tx.client.query(`INSERT INTO "${table}" (event_id, order_id) VALUES ($1, $2)`, [eventId, orderId])
    : (tx) => tx.client.prepare(`INSERT INTO "${table}" (event_id, order_id) VALUES (?, ?)`).run(eventId, orderId);
const result = await helper.store.process(
  { eventId, workflowId: orderId, type: 'SHIPMENT_REQUESTED' },
  {
    ruleSet: RuleSet.builtin('order-shipment'),
    onApplied: async (tx) => {
      await insert(tx);
      if (hang) {
        process.send('inside');
        await new Promise(() => {}); // until the test kills this process
      }
      return { shipped: orderId };
    },
  },
);
process.send({ outcome: result.outcome, output: result.output ?? result.original?.output ?? null });
await helper.close();
process.exit(0);
