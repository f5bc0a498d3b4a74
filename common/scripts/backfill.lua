-- backfill.lua — a job's backfill plan: the past fire times still to be run, at most N runs at once.
--
-- KEYS[1] job:{job}   KEYS[2] job:{job}:backfill (zset: scheduled ms → scheduled ms)   KEYS[3] backfills
-- ARGV[1] op: 'plan' | 'done' | 'drop'   ARGV[2] job id
-- plan: ARGV[3] most runs at once   ARGV[4..] scheduled times (ms). Adds the times not already pending.
--       Returns {status, added, pending}: status 'ok' | 'missing' (no such job) | 'cancelled'.
-- done: ARGV[3..] times that were fired (their runs exist now). Returns {'ok', 0, pending}; the job
--       leaves `backfills` with its last pending time.
-- drop: the whole plan goes (the job was cancelled or deleted). Returns {'ok', 0, 0}.
--
-- Invariant: a time leaves the plan only after its run exists (fire.lua, whose run key is the job id +
-- the time, so a crash between the firing and 'done' fires nothing twice: the next try finds the run).
local op = ARGV[1]
if op == 'drop' then
  redis.call('DEL', KEYS[2])
  redis.call('HDEL', KEYS[3], ARGV[2])
  return {'ok', 0, 0}
end
if op == 'done' then
  for i = 3, #ARGV do redis.call('ZREM', KEYS[2], ARGV[i]) end
  local pending = redis.call('ZCARD', KEYS[2])
  if pending == 0 then redis.call('HDEL', KEYS[3], ARGV[2]) end
  return {'ok', 0, pending}
end
if op ~= 'plan' then return redis.error_reply('backfill.lua: unknown op ' .. tostring(op)) end
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing', 0, 0} end
if state == 'CANCELLED' then return {'cancelled', 0, 0} end
local added = 0
for i = 4, #ARGV do added = added + redis.call('ZADD', KEYS[2], 'NX', ARGV[i], ARGV[i]) end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
return {'ok', added, redis.call('ZCARD', KEYS[2])}
