'use strict';
// The outbox consumer: claims due operations under a lease, runs the handler
// for each operation's type, and has the store record what the Rust core's
// policy says (done; retry at a time; dead; released). It decides nothing:
// expiry, backoff, admission and classification all come from the core. The
// store guards every record with the claim's fencing token, so a consumer
// whose lease was taken over can never record a result.

const { EventEmitter } = require('node:events');
const { IdemflowError } = require('../core/errors.cjs');
const telemetry = require('../core/telemetry.cjs');
const {
  consumerSettings,
  describeFailure,
  drainSettings,
  emptyTally,
  invalidArgument,
  settlesWithin,
  stopSettings,
  tally,
} = require('./arguments.cjs');

// What the consumer recorded, as the idemflow.outbox.operations counter names it (the events' names).
const RESULT_NAMES = { done: 'done', retry: 'retry-scheduled', dead: 'dead', release: 'released', stale: 'stale-completion' };

/**
 * Claims due operations from `store`, runs `handlers[operation.type]` for
 * each, and records the result. Emits claimed, done, retry-scheduled, dead,
 * released, lease-lost, stale-completion, store-error, stopped,
 * quarantined (a claimed row the store could not read, set aside as dead),
 * unhandled-type (operations of a type this consumer has no handler for
 * are pending in the store: once per type), the breaker's transitions, and
 * type-halted / type-resumed (a handler's fatal error stopped its type until
 * resume(type)).
 */
class OutboxConsumer extends EventEmitter {
  #store;
  #handlers;
  #types;
  #policy;
  #owner;
  #concurrency;
  #pollIntervalMs;
  #clock;
  #autoRenew;
  #inFlight = new Set();
  #claiming = Promise.resolve();
  #loop = null;
  #stopping = false;
  // Bumped by stop(): a claim round of an earlier epoch that answers late gives its operations back.
  #epoch = 0;
  #releasing = new Set();
  #wake = null;
  #renewTimer = null;
  #renewing = false;
  #stats = { ...emptyTally(), leaseLost: 0, quarantined: 0 };
  #typeCheckPolls;
  #pollsUntilTypeCheck = 0;
  #unhandledTypes = new Set();
  #backlogIntervalMs;
  #backlog = null;
  #breakerThreshold;
  #breakerProbeMs;
  // Per type: { state: 'closed' | 'open' | 'half-open', failures, openedAt, probeAt }.
  #breakers = new Map();
  // Types a handler's fatal error stopped, until resume(type): { haltedAt, operationId, error }.
  #halted = new Map();

  constructor(store, handlers, options = {}) {
    super();
    const settings = consumerSettings(store, handlers, options);
    this.#store = store;
    this.#handlers = settings.handlers;
    this.#types = [...this.#handlers.keys()];
    this.#policy = settings.policy;
    this.#concurrency = settings.concurrency;
    this.#pollIntervalMs = settings.pollIntervalMs;
    this.#owner = settings.owner;
    this.#clock = settings.clock;
    this.#autoRenew = settings.autoRenew;
    this.#typeCheckPolls = settings.typeCheckPolls;
    this.#backlogIntervalMs = settings.backlogIntervalMs;
    this.#breakerThreshold = settings.breakerThreshold;
    this.#breakerProbeMs = settings.breakerProbeMs;
    this.policy = settings.policyView;
  }

  /** The lease owner this consumer claims as. */
  get owner() {
    return this.#owner;
  }

  /** Handlers running now. */
  get inFlight() {
    return this.#inFlight.size;
  }

  /** True between start() and stop(). */
  get running() {
    return this.#loop !== null && !this.#stopping;
  }

  /**
   * The circuit breakers that are not closed, by type: `{ state: 'open' |
   * 'half-open', failures, openedAt, probeAt }`. An open type is not claimed
   * until `probeAt`, when one of its operations is claimed as a probe.
   */
  breakers() {
    const open = {};
    for (const [type, breaker] of this.#breakers) if (breaker.state !== 'closed') open[type] = { ...breaker };
    return open;
  }

  /**
   * The types a handler's fatal error stopped, by type: `{ haltedAt,
   * operationId, error }` (the operation whose handler threw it, and its
   * `lastError`). A halted type is not claimed until `resume(type)`; the
   * state is this consumer's own, so a new consumer (a restarted process)
   * starts with none.
   */
  halted() {
    const halted = {};
    for (const [type, halt] of this.#halted) halted[type] = { ...halt };
    return halted;
  }

  /**
   * Claims `type` again after a fatal error halted it (the worker was fixed
   * in place: a topic created, a setting changed): true when the type was
   * halted, false when it was not. A type this consumer has no handler for
   * is INVALID_ARGUMENT.
   */
  resume(type) {
    if (typeof type !== 'string' || !this.#handlers.has(type)) {
      throw invalidArgument(`consumer.resume: ${typeof type === 'string' ? type : String(type)} is not a type this consumer handles`, {
        field: 'type',
        reason: 'not a handled type',
      });
    }
    const halt = this.#halted.get(type);
    if (halt === undefined) return false;
    this.#halted.delete(type);
    telemetry.typeHaltChanged(type, -1);
    this.#emit('type-resumed', { type, ...halt });
    this.#wakeUp();
    return true;
  }

  /** Counts since this consumer was created. */
  stats() {
    return { ...this.#stats };
  }

  /** Polls the store until stop(): claims whenever a slot is free and work is due. */
  start() {
    if (this.#loop === null) {
      this.#stopping = false;
      this.#loop = this.#poll();
      // The backlog gauges while running (OpenTelemetry and store.stats() permitting).
      this.#backlog ??= telemetry.observeBacklog(this.#store, { intervalMs: this.#backlogIntervalMs });
    }
    return this;
  }

  /**
   * Stops claiming and waits for running handlers to finish (their leases
   * are renewed meanwhile). After `timeoutMs` it aborts their signals; a
   * handler that then fails is released (back to pending, the attempt not
   * counted). Handlers still running `abortGraceMs` later are abandoned:
   * their leases are no longer renewed and expire, and another consumer
   * takes them over. A claim in flight gets the same `timeoutMs` (a
   * database that does not answer cannot hold stop() up); operations a claim
   * returns once stop() was called are released, not run. Resolves within
   * `timeoutMs + abortGraceMs` to `{ abandoned: operationIds, claimPending }`:
   * the operations left claimed, and whether a claim was still unanswered.
   */
  async stop(options = {}) {
    const { timeoutMs, abortGraceMs } = stopSettings(options);
    const started = Date.now();
    const left = () => (timeoutMs === Infinity ? Infinity : Math.max(0, timeoutMs - (Date.now() - started)));
    this.#stopping = true;
    this.#wakeUp();
    // The poll loop ends once its claim round is answered.
    const loopEnded = this.#loop ?? Promise.resolve();
    this.#loop = null;
    const claimSettled = await settlesWithin(Promise.all([loopEnded, this.#claiming]), left());
    this.#epoch += 1;
    const running = () => Promise.all([...[...this.#inFlight].map((entry) => entry.finished), ...this.#releasing]);
    if (!(await settlesWithin(running(), left()))) {
      for (const entry of this.#inFlight) {
        entry.stopRequested = true;
        entry.controller.abort(new DOMException('the outbox consumer is stopping', 'AbortError'));
      }
      await settlesWithin(running(), abortGraceMs);
    }
    const abandoned = [];
    for (const entry of this.#inFlight) {
      entry.abandoned = true;
      abandoned.push(entry.operation.id);
    }
    for (const release of this.#releasing) abandoned.push(release.operationId);
    this.#stopRenewing();
    this.#backlog?.close();
    this.#backlog = null;
    this.#stopping = false;
    const result = { abandoned, claimPending: !claimSettled };
    this.#emit('stopped', { ...result });
    return result;
  }

  /**
   * One round: claims up to the free slots, runs those handlers and resolves
   * when their results are recorded, with counts of what happened.
   */
  async runOnce() {
    const started = await this.#claimRound();
    return tally(await Promise.all(started));
  }

  /** Rounds of runOnce until one claims nothing (or `maxRounds`); the summed counts. */
  async drain(options = {}) {
    const { maxRounds } = drainSettings(options);
    const total = { ...emptyTally(), rounds: 0 };
    while (total.rounds < maxRounds) {
      const round = await this.runOnce();
      total.rounds += 1;
      for (const key of Object.keys(round)) total[key] += round[key];
      if (round.claimed === 0) break;
    }
    return total;
  }

  /**
   * Extends the lease of every running handler (the renewal timer calls
   * this every `renewEveryMs`). A claim that is no longer this consumer's is
   * lost: its handler's signal is aborted and 'lease-lost' is emitted.
   */
  async renewLeases() {
    const now = this.#clock();
    const leaseExpiresAt = this.#policy.leaseExpiresAt(now);
    let renewed = 0;
    let lost = 0;
    for (const entry of [...this.#inFlight]) {
      if (entry.leaseLost || entry.recording || entry.abandoned) continue;
      const { id, fencingToken } = entry.operation;
      let ok;
      try {
        ok = await this.#store.renewLease({ id, fencingToken, now, leaseExpiresAt });
      } catch (error) {
        this.#emit('store-error', { ...entry.base, during: 'renew', error });
        continue;
      }
      // A handler that finished meanwhile was recorded under its token; nothing was lost.
      if (entry.recording || !this.#inFlight.has(entry)) continue;
      if (ok === true) {
        entry.operation.leaseExpiresAt = leaseExpiresAt;
        renewed += 1;
      } else {
        this.#loseLease(entry, 'renewal refused: another consumer holds the claim');
        lost += 1;
      }
    }
    return { renewed, lost };
  }

  #emit(name, payload) {
    if (name === 'store-error') telemetry.errorRaised(payload.error, 'outbox');
    try {
      this.emit(name, payload);
    } catch (error) {
      // A listener's bug must not corrupt the consumer's bookkeeping; it surfaces as an uncaught exception.
      process.nextTick(() => {
        throw error;
      });
    }
  }

  #loseLease(entry, why) {
    entry.leaseLost = true;
    this.#stats.leaseLost += 1;
    telemetry.outboxRecorded(entry.operation.type, 'lease-lost', entry.telemetry);
    entry.controller.abort(new DOMException(`the lease on outbox operation ${entry.operation.id} was lost (${why})`, 'AbortError'));
    this.#emit('lease-lost', { ...entry.base });
  }

  #claimRound() {
    const round = this.#claiming.then(() => this.#claimNow());
    this.#claiming = round.then(
      () => undefined,
      () => undefined,
    );
    return round;
  }

  async #claimNow() {
    const free = this.#concurrency - this.#inFlight.size;
    if (this.#stopping || free <= 0) return [];
    const epoch = this.#epoch;
    const now = this.#clock();
    const leaseExpiresAt = this.#policy.leaseExpiresAt(now);
    const claim = async (types, limit) => {
      const operations = await this.#store.claimOperations({
        owner: this.#owner,
        now,
        leaseExpiresAt,
        limit,
        types,
        onQuarantine: (report) => this.#quarantined(report),
      });
      if (!Array.isArray(operations)) {
        throw new IdemflowError('INVALID_RECORD', 'claimOperations must resolve to an array of operations', {
          details: { record: 'operation', field: '(claim)', reason: 'not an array' },
        });
      }
      return operations;
    };
    // Types whose breaker is open are left alone (an outage costs them no attempts), but one
    // operation of each whose probe is due is claimed on its own: half-open.
    // A halted type is not claimed at all, probe or not, until resume(type).
    const claimable = this.#types.filter((type) => !this.#halted.has(type));
    const closed = claimable.filter((type) => (this.#breakers.get(type)?.state ?? 'closed') === 'closed');
    const probing = claimable.filter((type) => {
      const breaker = this.#breakers.get(type);
      return breaker?.state === 'open' && breaker.probeAt <= now;
    });
    const claimed = [];
    for (const type of probing) {
      if (claimed.length >= free) break;
      const [probe] = await claim([type], 1);
      if (probe === undefined) {
        this.#breakers.get(type).probeAt = now + this.#breakerProbeMs;
        continue;
      }
      this.#setBreaker(type, 'half-open', now);
      claimed.push(probe);
    }
    if (closed.length > 0 && claimed.length < free) claimed.push(...(await claim(closed, free - claimed.length)));
    // Answered after stop() was called: give the claims back rather than start work nobody waits for.
    if (this.#stopping || epoch !== this.#epoch) {
      for (const operation of claimed) this.#giveBack(operation);
      return [];
    }
    return claimed.map((operation) => this.#begin(operation));
  }

  /** The store set aside a claimed row it could not read (marked dead when `recorded`); the rest of the claim runs. */
  #quarantined({ operationId, error, lastError, recorded, storeError }) {
    this.#stats.quarantined += 1;
    this.#emit('quarantined', { operationId, error, lastError, recorded, ...(storeError === undefined ? {} : { storeError }) });
  }

  /** Releases a claim unrun (pending, due now, the attempt given back); if that fails, its lease expires. */
  #giveBack(operation) {
    const release = this.#store
      .releaseOperation({ id: operation.id, fencingToken: operation.fencingToken, now: this.#clock() })
      .catch((error) => this.#emit('store-error', { operationId: operation.id, type: operation.type, during: 'release', error }))
      .finally(() => this.#releasing.delete(release));
    release.operationId = operation.id;
    this.#releasing.add(release);
  }

  /** A type's breaker after a handler of the type ended: `unavailable` failures open it, anything else closes it. */
  #breakerSaw(type, unavailable, now) {
    if (this.#breakerThreshold === 0) return;
    const breaker = this.#breakers.get(type) ?? { state: 'closed', failures: 0, openedAt: null, probeAt: null };
    this.#breakers.set(type, breaker);
    if (!unavailable) {
      breaker.failures = 0;
      if (breaker.state !== 'closed') this.#setBreaker(type, 'closed', now);
      return;
    }
    breaker.failures += 1;
    // A failed probe opens it again at once; a closed breaker opens at the threshold.
    if (breaker.state === 'half-open' || (breaker.state === 'closed' && breaker.failures >= this.#breakerThreshold)) {
      this.#setBreaker(type, 'open', now);
    }
  }

  /**
   * A handler threw an IdemflowError of disposition fatal: its worker is
   * misconfigured (a topic with the wrong partition count, a missing
   * setting), so every operation of the type would fail the same way and
   * burn its attempts until dead. The type is halted (not claimed until
   * resume(type)), and a verdict that would count the attempt (a retry, or
   * dead on the last attempt) is recorded as a retry due now with the
   * attempt given back, as an outage's is, keeping the core's lastError: the
   * operation waits, pending, for a fixed worker. A verdict that counts no
   * attempt, or a dead one for another reason (`retryable: false`), stands.
   */
  #haltFor(entry, verdict, now) {
    const { type } = entry.operation;
    const counted =
      (verdict.verdict === 'retry' && verdict.attemptCounted !== false) ||
      (verdict.verdict === 'dead' && verdict.reason === 'max-attempts');
    if (!counted) return verdict;
    if (!this.#halted.has(type)) {
      const halt = { haltedAt: now, operationId: entry.operation.id, error: verdict.lastError };
      this.#halted.set(type, halt);
      telemetry.typeHaltChanged(type, 1);
      this.#emit('type-halted', { ...entry.base, haltedAt: now, error: verdict.lastError });
    }
    return { verdict: 'retry', delayMs: 0, nextAttemptAt: now, lastError: verdict.lastError, attemptCounted: false };
  }

  #setBreaker(type, state, now) {
    const breaker = this.#breakers.get(type);
    const was = breaker.state;
    breaker.state = state;
    if (state === 'open') {
      breaker.openedAt = was === 'closed' ? now : breaker.openedAt;
      breaker.probeAt = now + this.#breakerProbeMs;
    }
    if (state === 'closed') {
      breaker.openedAt = null;
      breaker.probeAt = null;
    }
    if (was === 'closed' && state !== 'closed') telemetry.breakerChanged(type, 1);
    if (was !== 'closed' && state === 'closed') telemetry.breakerChanged(type, -1);
    if (was !== state) {
      this.#emit(`breaker-${state === 'half-open' ? 'half-open' : state === 'open' ? 'opened' : 'closed'}`, {
        type,
        failures: breaker.failures,
        openedAt: breaker.openedAt,
        probeAt: breaker.probeAt,
      });
    }
  }

  #begin(operation) {
    const entry = {
      operation,
      base: {
        operationId: operation.id,
        type: operation.type,
        attempt: operation.attempts,
        fencingToken: operation.fencingToken,
      },
      controller: new AbortController(),
      stopRequested: false,
      leaseLost: false,
      recording: false,
      abandoned: false,
      finished: null,
      telemetry: null,
      judged: false,
    };
    // This consumer's own earlier claim of the operation expired and it claimed it again.
    // An earlier entry already recording its result lost nothing: either its fenced write
    // committed (a retry due at once, claimed again before its bookkeeping ended) or it
    // will be refused and reported as a stale completion.
    for (const earlier of this.#inFlight) {
      if (earlier.operation.id === operation.id && !earlier.leaseLost && !earlier.recording) {
        this.#loseLease(earlier, 'claimed again after the lease expired');
      }
    }
    this.#inFlight.add(entry);
    this.#startRenewing();
    entry.finished = this.#execute(entry).finally(() => {
      this.#inFlight.delete(entry);
      // A probe that ended without a verdict on the downstream (released, stale, a store error): probe again later.
      if (this.#breakers.get(operation.type)?.state === 'half-open' && !entry.judged)
        this.#setBreaker(operation.type, 'open', this.#clock());
      if (this.#inFlight.size === 0) this.#stopRenewing();
      this.#wakeUp();
    });
    return entry.finished;
  }

  async #execute(entry) {
    entry.telemetry = telemetry.handlerStarted(entry.operation, this.#owner);
    try {
      const outcome = await this.#run(entry);
      if (outcome in RESULT_NAMES) telemetry.outboxRecorded(entry.operation.type, RESULT_NAMES[outcome], entry.telemetry);
      return outcome;
    } finally {
      telemetry.handlerEnded(entry.telemetry);
    }
  }

  async #run(entry) {
    const { operation, base } = entry;
    this.#stats.claimed += 1;
    this.#emit('claimed', { ...base, owner: this.#owner, leaseExpiresAt: operation.leaseExpiresAt });
    let verdict;
    let now;
    try {
      const admission = this.#policy.admit(operation.attempts);
      const handler = this.#handlers.get(operation.type);
      if (admission.verdict === 'dead') {
        verdict = admission;
      } else if (this.#halted.has(operation.type)) {
        // Claimed in the round that halted its type: given back unrun, the attempt not counted.
        verdict = { verdict: 'release' };
      } else if (handler === undefined) {
        // The store ignored the types filter: give the claim back to a consumer that can run it.
        this.#emit('store-error', {
          ...base,
          during: 'claim',
          error: invalidArgument(`no handler for operation type ${operation.type}`, { reason: 'no handler' }),
        });
        verdict = { verdict: 'release' };
      } else {
        const result = await this.#runHandler(entry, handler);
        now = this.#clock();
        const createdAt = Number.isSafeInteger(operation.createdAt) ? operation.createdAt : null;
        verdict = this.#policy.classify({ operationId: operation.id, attempt: operation.attempts, createdAt, now, result });
        entry.judged = !(result.ok === false && result.stopping);
        if (entry.judged) this.#breakerSaw(operation.type, result.ok === false && result.unavailable, now);
        if (entry.judged && result.ok === false && result.disposition === 'fatal') verdict = this.#haltFor(entry, verdict, now);
      }
    } catch (error) {
      // The core refused the stored operation (say attempts is not a number): leave the claim to expire.
      this.#stats.errors += 1;
      this.#emit('store-error', { ...base, during: 'classify', error });
      return 'error';
    }
    return this.#record(entry, verdict, now ?? this.#clock());
  }

  async #runHandler(entry, handler) {
    const { operation, controller } = entry;
    const context = Object.freeze({
      idempotencyKey: operation.id,
      attempt: operation.attempts,
      fencingToken: operation.fencingToken,
      owner: this.#owner,
      signal: controller.signal,
      metadata: operation.metadata === null || operation.metadata === undefined ? null : structuredClone(operation.metadata),
      traceContext: operation.traceContext ?? null,
    });
    try {
      await telemetry.inHandlerSpan(entry.telemetry, () => handler(structuredClone(operation), context));
      telemetry.handlerReturned(entry.telemetry);
      return { ok: true };
    } catch (thrown) {
      const failure = describeFailure(thrown, entry.stopRequested);
      telemetry.handlerReturned(entry.telemetry, failure);
      return failure;
    }
  }

  async #record(entry, verdict, now) {
    entry.recording = true;
    const { base } = entry;
    const key = { id: entry.operation.id, fencingToken: entry.operation.fencingToken, now };
    let recorded;
    try {
      switch (verdict.verdict) {
        case 'done':
          recorded = await this.#store.completeOperation(key);
          break;
        case 'retry':
          recorded = await this.#store.failOperation({
            ...key,
            status: 'pending',
            nextAttemptAt: verdict.nextAttemptAt,
            lastError: verdict.lastError,
            ...(verdict.attemptCounted === false ? { attemptCounted: false } : {}),
          });
          break;
        case 'dead':
          recorded = await this.#store.failOperation({ ...key, status: 'dead', lastError: verdict.lastError });
          break;
        default:
          recorded = await this.#store.releaseOperation(key);
          break;
      }
    } catch (error) {
      this.#stats.errors += 1;
      this.#emit('store-error', { ...base, during: verdict.verdict, error });
      return 'error';
    }
    if (recorded !== true) {
      // The claim was taken over (its lease expired and another consumer claimed it): nothing was recorded.
      this.#stats.stale += 1;
      this.#emit('stale-completion', { ...base, verdict: verdict.verdict });
      return 'stale';
    }
    switch (verdict.verdict) {
      case 'done':
        this.#stats.done += 1;
        this.#emit('done', { ...base });
        return 'done';
      case 'retry':
        this.#stats.retried += 1;
        this.#emit('retry-scheduled', {
          ...base,
          delayMs: verdict.delayMs,
          nextAttemptAt: verdict.nextAttemptAt,
          attemptCounted: verdict.attemptCounted,
          error: verdict.lastError,
        });
        return 'retry';
      case 'dead':
        this.#stats.dead += 1;
        this.#emit('dead', { ...base, reason: verdict.reason, error: verdict.lastError });
        return 'dead';
      default:
        this.#stats.released += 1;
        this.#emit('released', { ...base });
        return 'release';
    }
  }

  /**
   * On the first poll and then every `typeCheckPolls` polls: asks the store's
   * stats() (when it has one) for pending operations of types no handler of
   * this consumer takes, and emits 'unhandled-type' once per such type. They
   * would otherwise wait in silence: the consumer never claims them.
   */
  async #checkTypes() {
    if (this.#typeCheckPolls === 0 || typeof this.#store.stats !== 'function') return;
    if (this.#pollsUntilTypeCheck > 0) {
      this.#pollsUntilTypeCheck -= 1;
      return;
    }
    this.#pollsUntilTypeCheck = this.#typeCheckPolls - 1;
    let stats;
    try {
      stats = await this.#store.stats({ now: this.#clock() });
    } catch (error) {
      this.#emit('store-error', { during: 'stats', error });
      return;
    }
    const byType =
      stats !== null && typeof stats === 'object' && stats.byType !== null && typeof stats.byType === 'object' ? stats.byType : {};
    for (const [type, counts] of Object.entries(byType)) {
      const pending = counts !== null && typeof counts === 'object' ? counts.pending : 0;
      if (this.#handlers.has(type) || this.#unhandledTypes.has(type) || !(Number.isSafeInteger(pending) && pending > 0)) continue;
      this.#unhandledTypes.add(type);
      this.#emit('unhandled-type', { type, pending });
    }
  }

  async #poll() {
    const epoch = this.#epoch;
    while (!this.#stopping && epoch === this.#epoch) {
      await this.#checkTypes();
      if (this.#stopping) break;
      let claimed = 0;
      try {
        claimed = (await this.#claimRound()).length;
      } catch (error) {
        this.#emit('store-error', { during: 'claim', error });
      }
      if (this.#stopping) break;
      // More may be due: claim again at once while slots are free; otherwise wait for a slot or the next poll.
      if (claimed === 0 || this.#inFlight.size >= this.#concurrency) await this.#sleep(this.#pollIntervalMs);
    }
  }

  #sleep(ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#wake = null;
        resolve();
      }, ms);
      this.#wake = () => {
        clearTimeout(timer);
        this.#wake = null;
        resolve();
      };
    });
  }

  #wakeUp() {
    if (this.#wake !== null) this.#wake();
  }

  #startRenewing() {
    if (!this.#autoRenew || this.#renewTimer !== null) return;
    this.#renewTimer = setInterval(() => {
      if (this.#renewing) return;
      this.#renewing = true;
      this.renewLeases()
        .catch((error) => this.#emit('store-error', { during: 'renew', error }))
        .finally(() => {
          this.#renewing = false;
        });
    }, this.#policy.settings.renewEveryMs);
    this.#renewTimer.unref();
  }

  #stopRenewing() {
    if (this.#renewTimer !== null) clearInterval(this.#renewTimer);
    this.#renewTimer = null;
  }
}

/**
 * createOutboxConsumer(store, handlers, options): a consumer that runs
 * `handlers[operation.type](operation, { idempotencyKey, attempt,
 * fencingToken, owner, signal })` for the store's due operations.
 */
function createOutboxConsumer(store, handlers, options) {
  return new OutboxConsumer(store, handlers, options);
}

module.exports = { createOutboxConsumer };
