// Compiled with tsc --strict (never run): the public types as an ESM consumer sees them.
import {
  type Decision,
  type Disposition,
  decide,
  fingerprint,
  IdemflowError,
  InMemoryStore,
  type ProcessResult,
  processEvent,
  RuleSet,
  validateEvent,
  verifyRuleSet,
  type WriteSet,
} from 'idemflow';

// deposit-swap v3 keeps a deposit in the swap's deposits map until the exchange.
const store = new InMemoryStore([
  { id: 'swap-42', status: 'deposit', revision: 3, deposits: { r: { event: 'DEPOSIT_DETECTED', amountUnits: '1', sequence: 1 } } },
]);
const event = { eventId: 'e', workflowId: 'swap-42', type: 'DEPOSIT_CONFIRMED', depositRef: 'r', amountUnits: '1', sequence: 2 };

async function handle(raw: unknown): Promise<'ack' | 'nack' | 'dead-letter' | 'alert' | 'stop'> {
  try {
    validateEvent(raw);
    const result: ProcessResult = await processEvent(store, raw, { ruleSet: RuleSet.builtin('deposit-swap') });
    if (result.outcome === 'applied') {
      const id: string | null = result.operationId;
      const revision: number = result.revision;
      void id;
      void revision;
    }
    return 'ack';
  } catch (error) {
    if (!(error instanceof IdemflowError)) throw error;
    const disposition: Disposition = error.disposition;
    const field: string | undefined = error.details.field;
    void field;
    switch (disposition) {
      case 'retry':
        return 'nack';
      case 'reject':
        return 'dead-letter';
      case 'reconcile':
        return 'alert';
      case 'fatal':
        return 'stop';
    }
  }
}

const fp: string = fingerprint(event);
const decision: Decision = decide({ event, receipt: null, workflow: null });
const writes: WriteSet = decision.writeSet;
const expectRevision: number | undefined = writes.workflow?.expect?.revision;
const hash: string = RuleSet.fromJSON(RuleSet.builtin('order-shipment').definition()).hash;
const ok: boolean = verifyRuleSet(RuleSet.builtin('deposit-swap')).ok;
void [fp, expectRevision, hash, ok, handle];

// No `any` on the public surface: each of these fails to compile if the type were `any`.
type IsAny<T> = 0 extends 1 & T ? true : false;
const noAny: [
  IsAny<ReturnType<typeof decide>>,
  IsAny<ReturnType<typeof fingerprint>>,
  IsAny<Awaited<ReturnType<typeof processEvent>>>,
  IsAny<ReturnType<typeof verifyRuleSet>>,
  IsAny<IdemflowError['details']>,
  IsAny<IdemflowError['code']>,
  IsAny<ReturnType<RuleSet['table']>>,
  IsAny<ReturnType<InMemoryStore['snapshot']>>,
] = [false, false, false, false, false, false, false, false];
void noAny;
