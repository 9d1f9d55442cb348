// @ts-check
'use strict';
// The Lua scripts of the Redis store. Every write the store makes is one of
// these scripts, so each runs atomically on the server: nothing else runs
// between its checks and its writes. A script checks everything that could
// make it fail before its first write (Redis does not undo a script's earlier
// writes when a later command fails), and each starts with `#!lua`, so a
// server over its memory limit refuses it before it begins rather than half
// way through.
//
// Records are hashes whose fields hold text (numbers in decimal, objects as
// JSON); `_v` counts a record's writes, and a transaction's commit is refused
// when a record it read has been written since (the `_v` it saw) or a record
// it found absent exists. The scripts never decode or encode a number of a
// record's JSON (Lua's cjson rounds to 14 digits): what they compare and
// store is the text the store wrote.
//
// Keys (T is a table name of options.tables):
//   T:r:<id>           a record: workflow, receipt or operation
//   <inbox>:i:at       receipts by recordedAt (purgeReceipts)
//   <outbox>:i:due     pending operations by nextAttemptAt and claimed ones by leaseExpiresAt
//   <outbox>:i:ids     every operation id (score 0: listOperations by id)
//   <outbox>:i:s:<st>  the ids of one status (score 0)
//   <outbox>:i:u:<st>  the ids of one status by updatedAt (purgeOperations)
//   <outbox>:i:counts  status NUL type -> count (stats)
//   <inbox>:h:<key>    the keyed mode's hold on an idempotency key
//   <inbox>:l:<name>   withExclusiveLock's lease

const { createHash } = require('node:crypto');

/** The index upkeep of an operation whose record just changed (or was removed): old status and type as they were. */
const OPERATION_INDEX = `
local function count(out, status, typ, by)
  local field = status .. '\\0' .. (typ or '')
  if redis.call('HINCRBY', out .. ':i:counts', field, by) <= 0 then redis.call('HDEL', out .. ':i:counts', field) end
end

local function reindex(out, id, oldStatus, oldType)
  local key = out .. ':r:' .. id
  local now = redis.call('HMGET', key, 'status', 'type', 'nextAttemptAt', 'leaseExpiresAt', 'updatedAt')
  local status = now[1]
  if oldStatus then
    redis.call('ZREM', out .. ':i:s:' .. oldStatus, id)
    redis.call('ZREM', out .. ':i:u:' .. oldStatus, id)
    count(out, oldStatus, oldType, -1)
  end
  if not status then
    redis.call('ZREM', out .. ':i:ids', id)
    redis.call('ZREM', out .. ':i:due', id)
    return
  end
  redis.call('ZADD', out .. ':i:ids', 0, id)
  redis.call('ZADD', out .. ':i:s:' .. status, 0, id)
  count(out, status, now[2], 1)
  if tonumber(now[5]) then redis.call('ZADD', out .. ':i:u:' .. status, now[5], id) end
  if status == 'pending' and tonumber(now[3]) then
    redis.call('ZADD', out .. ':i:due', now[3], id)
  elseif status == 'claimed' and tonumber(now[4]) then
    redis.call('ZADD', out .. ':i:due', now[4], id)
  else
    redis.call('ZREM', out .. ':i:due', id)
  end
end
`;

/**
 * A transaction's commit. ARGV[1] is the plan as JSON, every value text:
 *   i, o    the inbox and outbox table names
 *   g       guards [key, v]: the record's _v must still be v ('' : the record must not exist); a key read
 *           as something else than a hash has no guard (no delivery writes over it)
 *   t       the host's type checks [key, type, 'int' | '', field]: the key must be absent or of the type
 *           (and, with 'int', its value, or the hash field, a whole number) before anything is written
 *   w       writes, in order:
 *             ['wf', key, createdAt, field, value, ...]    a workflow record (createdAt kept when it exists)
 *             ['rc', key, eventId, recordedAt, field, value, ...]
 *             ['op', key, id, ifAbsent, field, value, ...] ('1': skipped when the id exists)
 *             ['h', command, arg, ...]                     a host command
 * Answers {'ok'}, {'guard', i} (the i-th guard failed) or {'host', i, why}: nothing was written then.
 */
const COMMIT = `#!lua
${OPERATION_INDEX}
local plan = cjson.decode(ARGV[1])
for i, guard in ipairs(plan.g) do
  if guard[2] == '' then
    if redis.call('EXISTS', guard[1]) == 1 then return {'guard', i} end
  else
    -- pcall: a key that stopped being a hash fails its guard instead of the script.
    local v = redis.pcall('HGET', guard[1], '_v')
    if v ~= guard[2] then return {'guard', i} end
  end
end
for i, check in ipairs(plan.t) do
  local kind = redis.call('TYPE', check[1])['ok']
  if kind ~= 'none' and kind ~= check[2] then return {'host', i, check[1] .. ' holds a ' .. kind} end
  if check[3] == 'int' and kind ~= 'none' then
    local value
    if check[2] == 'hash' then value = redis.call('HGET', check[1], check[4]) else value = redis.call('GET', check[1]) end
    if value and not string.match(value, '^%-?%d+$') then return {'host', i, check[1] .. ' does not hold a whole number'} end
  end
end
for _, write in ipairs(plan.w) do
  local kind = write[1]
  if kind == 'wf' then
    redis.call('HSETNX', write[2], 'createdAt', write[3])
    redis.call('HSET', write[2], unpack(write, 4))
    redis.call('HINCRBY', write[2], '_v', 1)
  elseif kind == 'rc' then
    redis.call('HSET', write[2], unpack(write, 5))
    redis.call('HINCRBY', write[2], '_v', 1)
    redis.call('ZADD', plan.i .. ':i:at', write[4], write[3])
  elseif kind == 'op' then
    if write[4] ~= '1' or redis.call('EXISTS', write[2]) == 0 then
      local old = redis.call('HMGET', write[2], 'status', 'type')
      redis.call('HSET', write[2], unpack(write, 5))
      redis.call('HINCRBY', write[2], '_v', 1)
      reindex(plan.o, write[3], old[1], old[2])
    end
  elseif kind == 'h' then
    redis.call(unpack(write, 2))
  end
end
return {'ok'}
`;

/** The records at KEYS, each as {fields...} flat (an empty list: absent); a key that holds no hash answers {'!', type}. */
const READ = `#!lua flags=no-writes
local out = {}
for i, key in ipairs(KEYS) do
  local kind = redis.call('TYPE', key)['ok']
  if kind == 'hash' or kind == 'none' then out[i] = redis.call('HGETALL', key) else out[i] = {'!', kind} end
end
return out
`;

/** A workflow put outside a transaction: ARGV createdAt, field, value, ... at KEYS[1]. */
const PUT = `#!lua
if redis.call('EXISTS', KEYS[1]) == 1 and redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then redis.call('DEL', KEYS[1]) end
redis.call('HSETNX', KEYS[1], 'createdAt', ARGV[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('HINCRBY', KEYS[1], '_v', 1)
return 1
`;

/**
 * Claims up to ARGV[5] due operations: ARGV outbox, now, leaseExpiresAt,
 * owner, limit, types (JSON list, '' for every type), scan bound. Oldest due
 * first; a record whose status or times cannot be read is not due. Answers
 * the claimed records, each flat.
 */
const CLAIM = `#!lua
${OPERATION_INDEX}
local out, now, lease, owner, limit = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], tonumber(ARGV[5])
local bound = tonumber(ARGV[7])
local types = nil
if ARGV[6] ~= '' then
  types = {}
  for _, name in ipairs(cjson.decode(ARGV[6])) do types[name] = true end
end
local claimed, taken, offset, scanned = {}, {}, 0, 0
while #claimed < limit and scanned < bound do
  local ids = redis.call('ZRANGEBYSCORE', out .. ':i:due', '-inf', ARGV[2], 'LIMIT', offset, 100)
  if #ids == 0 then break end
  local stays = 0
  for _, id in ipairs(ids) do
    scanned = scanned + 1
    local moved = false
    if #claimed < limit and not taken[id] then
      local key = out .. ':r:' .. id
      local f = redis.call('HMGET', key, 'status', 'type', 'nextAttemptAt', 'leaseExpiresAt', 'attempts', 'fencingToken')
      local due = (f[1] == 'pending' and tonumber(f[3]) ~= nil and tonumber(f[3]) <= now)
        or (f[1] == 'claimed' and tonumber(f[4]) ~= nil and tonumber(f[4]) <= now)
      if due and (types == nil or types[f[2]]) then
        redis.call('HSET', key, 'status', 'claimed', 'leaseOwner', owner, 'leaseExpiresAt', lease, 'updatedAt', ARGV[2])
        -- A count that cannot be read stays as it is: the record is then quarantined as unreadable.
        if f[5] and string.match(f[5], '^%d+$') then redis.call('HINCRBY', key, 'attempts', 1) end
        if f[6] and string.match(f[6], '^%d+$') then redis.call('HINCRBY', key, 'fencingToken', 1) end
        redis.call('HINCRBY', key, '_v', 1)
        reindex(out, id, f[1], f[2])
        taken[id] = true
        claimed[#claimed + 1] = redis.call('HGETALL', key)
        moved = tonumber(lease) > now
      end
    end
    if not moved then stays = stays + 1 end
  end
  offset = offset + stays
end
return claimed
`;

/**
 * One guarded change of an operation: ARGV outbox, id, status, fencing token
 * ('' : any), give the attempt back ('1'), set (JSON [field, value] pairs),
 * removed (JSON field list). 1 when it matched and was made, else 0.
 */
const UPDATE = `#!lua
${OPERATION_INDEX}
local out, id = ARGV[1], ARGV[2]
local key = out .. ':r:' .. id
if redis.call('TYPE', key)['ok'] ~= 'hash' then return 0 end
local f = redis.call('HMGET', key, 'status', 'fencingToken', 'type', 'attempts')
if f[1] ~= ARGV[3] then return 0 end
if ARGV[4] ~= '' and f[2] ~= ARGV[4] then return 0 end
local set = cjson.decode(ARGV[6])
if #set > 0 then
  local flat = {}
  for _, pair in ipairs(set) do
    flat[#flat + 1] = pair[1]
    flat[#flat + 1] = pair[2]
  end
  redis.call('HSET', key, unpack(flat))
end
local removed = cjson.decode(ARGV[7])
if #removed > 0 then redis.call('HDEL', key, unpack(removed)) end
if ARGV[5] == '1' and f[4] and string.match(f[4], '^%d+$') and tonumber(f[4]) > 0 then redis.call('HINCRBY', key, 'attempts', -1) end
redis.call('HINCRBY', key, '_v', 1)
reindex(out, id, f[1], f[3])
return 1
`;

/** stats: ARGV outbox, now. Answers {counts flat (status NUL type, n, ...), oldest due score or false}. */
const STATS = `#!lua flags=no-writes
local out = ARGV[1]
local first = redis.call('ZRANGEBYSCORE', out .. ':i:due', '-inf', ARGV[2], 'WITHSCORES', 'LIMIT', 0, 1)
return {redis.call('HGETALL', out .. ':i:counts'), first[2] or false}
`;

/** One purge batch of receipts: ARGV inbox, olderThan (exclusive), batch size. Answers how many were deleted. */
const PURGE_RECEIPTS = `#!lua
local inbox = ARGV[1]
local ids = redis.call('ZRANGEBYSCORE', inbox .. ':i:at', '-inf', '(' .. ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(ids) do
  redis.call('DEL', inbox .. ':r:' .. id)
  redis.call('ZREM', inbox .. ':i:at', id)
end
return #ids
`;

/** One purge batch of operations of one status: ARGV outbox, status, olderThan (exclusive), batch size. */
const PURGE_OPERATIONS = `#!lua
${OPERATION_INDEX}
local out, status = ARGV[1], ARGV[2]
local ids = redis.call('ZRANGEBYSCORE', out .. ':i:u:' .. status, '-inf', '(' .. ARGV[3], 'LIMIT', 0, tonumber(ARGV[4]))
local deleted = 0
for _, id in ipairs(ids) do
  local key = out .. ':r:' .. id
  local f = redis.call('HMGET', key, 'status', 'type')
  if f[1] == status then
    redis.call('DEL', key)
    deleted = deleted + 1
    reindex(out, id, f[1], f[2])
  else
    redis.call('ZREM', out .. ':i:u:' .. status, id)
  end
end
return deleted
`;

/** An operation's indexes brought up to its record, after it was written by hand: ARGV outbox, id, old status, old type ('' : none). */
const REINDEX = `#!lua
${OPERATION_INDEX}
local old = ARGV[3]
if old == '' then old = nil end
reindex(ARGV[1], ARGV[2], old, ARGV[4])
return 1
`;

/** KEYS[1] deleted when it holds ARGV[1]: a lock or hold given back by its owner only. */
const RELEASE = `#!lua
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`;

const SOURCES = { COMMIT, READ, PUT, CLAIM, UPDATE, STATS, PURGE_RECEIPTS, PURGE_OPERATIONS, REINDEX, RELEASE };

/** Each script with its SHA-1, for EVALSHA. */
const SCRIPTS = Object.freeze(
  Object.fromEntries(
    Object.entries(SOURCES).map(([name, source]) => [
      name,
      Object.freeze({ name, source, sha: createHash('sha1').update(source).digest('hex') }),
    ]),
  ),
);

module.exports = { SCRIPTS };
