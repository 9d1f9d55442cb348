'use strict';
// What the command line reads from its arguments: options, durations like
// 30d, and the usage error (exit 2) every command throws for a call it
// cannot run as given.

class UsageError extends Error {}

/**
 * `{ positional, options }` from `args`, where `known` names each `--option`
 * as 'value' (takes the next argument) or 'flag'.
 */
function flags(args, known) {
  const positional = [];
  const options = {};
  for (let i = 0; i < args.length; i += 1) {
    const arg = args[i];
    if (!arg.startsWith('--')) {
      positional.push(arg);
      continue;
    }
    const name = arg.slice(2);
    if (!Object.hasOwn(known, name)) throw new UsageError(`unknown option ${arg}`);
    if (known[name] === 'value') {
      if (i + 1 >= args.length) throw new UsageError(`${arg} needs a value`);
      if (Object.hasOwn(options, name)) throw new UsageError(`${arg} is given twice`);
      i += 1;
      options[name] = args[i];
    } else {
      options[name] = true;
    }
  }
  return { positional, options };
}

const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** Milliseconds of a duration such as 500ms, 45s, 90m, 12h, 30d or 2w. */
function duration(text, option) {
  const match = /^([0-9]{1,9})(ms|s|m|h|d|w)$/.exec(text);
  if (match === null)
    throw new UsageError(`${option} takes a duration such as 90m, 12h or 30d (units ms, s, m, h, d, w), not ${JSON.stringify(text)}`);
  return Number(match[1]) * UNIT_MS[match[2]];
}

/** A whole number of at least `min`, from an option's text. */
function count(text, option, min = 1) {
  if (!/^[0-9]{1,15}$/.test(text) || Number(text) < min)
    throw new UsageError(`${option} takes a whole number from ${min}, not ${JSON.stringify(text)}`);
  return Number(text);
}

/** An age in words: 850ms, 42s, 17m 5s, 3h 20m, 2d 4h. */
function age(ms) {
  if (ms < 1000) return `${ms}ms`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const [d, h, m] = [Math.floor(s / 86400), Math.floor((s % 86400) / 3600), Math.floor((s % 3600) / 60)];
  if (d > 0) return `${d}d ${h}h`;
  if (h > 0) return `${h}h ${m}m`;
  return `${m}m ${s % 60}s`;
}

module.exports = { UsageError, flags, duration, count, age };
