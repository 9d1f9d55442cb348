'use strict';
// Sequencing that stays synchronous when the work is: `step(value, next)` is
// next(value) now for a plain value, value.then(next) for a promise. A store
// over a synchronous driver (SQLite) then reads, decides and writes a
// delivery without a promise per statement; an asynchronous one chains as
// it always did.

function isPromise(value) {
  return value !== null && typeof value === 'object' && typeof value.then === 'function';
}

/** next(value), now or once value settles. */
function step(value, next) {
  return isPromise(value) ? value.then(next) : next(value);
}

/** fn(item) for each item in order, each after the previous settled: undefined, or a promise when one was. */
function eachStep(items, fn, from = 0) {
  for (let i = from; i < items.length; i += 1) {
    const done = fn(items[i]);
    if (isPromise(done)) return done.then(() => eachStep(items, fn, i + 1));
  }
  return undefined;
}

module.exports = { isPromise, step, eachStep };
