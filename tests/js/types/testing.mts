// A strict consumer of idemflow/testing and RuleSet#graph, checked by `tsc -p tsconfig.json`.

import { RuleSet } from 'idemflow';
import { assertEveryOrder, type EndState, type Exploration, exploreOrders } from 'idemflow/testing';

const ruleSet = RuleSet.builtin('order-shipment');
const mermaid: string = ruleSet.graph();
const dot: string = ruleSet.graph({ format: 'dot', conditions: true, all: false });
// @ts-expect-error: a format the diagram does not have
ruleSet.graph({ format: 'svg' });

const events = [{ eventId: 'e1', workflowId: 'order-1', type: 'SHIPMENT_REQUESTED' }];
const exploration: Exploration = await exploreOrders({ ruleSet, events, duplicates: true, retries: 1, maxStates: 1000 });
const first: EndState = exploration.endStates[0].state;
const status: string = first.workflows[0].status;
const end: EndState = await assertEveryOrder({ ruleSet: 'order-shipment', events, expected: { operations: [] } });
// @ts-expect-error: the rule set is required
await exploreOrders({ events });

export { dot, end, mermaid, status };
