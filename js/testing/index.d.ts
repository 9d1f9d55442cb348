// idemflow/testing: every delivery order of a history, through the real decider.
import type { BuiltinRuleSetName, EventInput, RuleSet, Workflow } from '../core/types.js';

export interface ExploreOptions {
  /** The rule set under test (required). */
  ruleSet: RuleSet | BuiltinRuleSetName;
  /** The history: every event is delivered once (twice with `duplicates`), in every order. */
  events: readonly EventInput[];
  /** The workflows as they stand before the history (default: none). */
  workflows?: readonly Workflow[];
  /** Deliver every event twice (a broker's redelivery). Default false. */
  duplicates?: boolean;
  /** Redeliveries of an event answered with a retry error (UNKNOWN_WORKFLOW, …). Default 2. */
  retries?: number;
  /** Distinct states explored at most; past it, a fatal INVALID_ARGUMENT. Default 100,000. */
  maxStates?: number;
}

/** What an order ends in. Revisions are left out: a stale delivery does not advance one, so they differ between orders that agree. */
export interface EndState {
  /** Each workflow's status and the fields the rule set recorded. */
  workflows: { id: string; status: string; fields: { [field: string]: unknown } }[];
  operations: { id: string; type: string; payload: unknown }[];
  /** Events whose last delivery was answered with an error. */
  unresolved: { eventId: string; code: string; disposition: string }[];
}

export interface Exploration {
  /** The distinct end states, each with how many orders reach it and one order (event ids) that does. */
  endStates: { state: EndState; orders: number; example: string[] }[];
  /** Delivery orders explored. */
  orders: number;
  /** Distinct (state, deliveries left) configurations visited. */
  states: number;
}

export function exploreOrders(options: ExploreOptions): Promise<Exploration>;

/**
 * Resolves to the one end state every order reaches; throws node:assert's
 * AssertionError when orders end differently, or (with `expected`) when the
 * end state's given parts differ from it.
 */
export function assertEveryOrder(options: ExploreOptions & { expected?: Partial<EndState> }): Promise<EndState>;
