-- submit.lua — store a new job and its first fire time, at most once per idempotency key.
--
-- KEYS[1] job:{job}      KEYS[2] jobs      KEYS[3] schedule      KEYS[4] idem:{key} (unused when ARGV[8]=='')
-- ARGV[1] job id   ARGV[2] spec JSON   ARGV[3] name   ARGV[4] group   ARGV[5] priority
-- ARGV[6] fire mode: 'abs' (ARGV[7] is epoch ms) | 'delay' (ARGV[7] is ms from Redis TIME now)
-- ARGV[8] idempotency key ('' for none)   ARGV[9] idempotency TTL ms
-- ARGV[10] run id to create at once ('' for none: the job waits in the schedule)   ARGV[11] its scheduled
-- ms   ARGV[12..] the run block of create_run (lib.lua). A one-shot job due now fires here, in the same
-- step as its submission: it is COMPLETED (no more firings) with its run already queued.
-- Returns {job id, duplicate (0|1), created_ms, next_fire_ms, run created (0|1)}.
--
-- Invariant: a job is written together with its schedule entry (never one without the other), and a
-- key maps to one job for its TTL, so a client retrying a submit after a lost reply gets the same job.
local now = now_ms()
if ARGV[8] ~= '' then
  local existing = redis.call('GET', KEYS[4])
  if existing and redis.call('EXISTS', K.job(existing)) == 1 then
    local j = redis.call('HMGET', K.job(existing), 'created_ms', 'next_fire_ms')
    return {existing, 1, tonumber(j[1]), tonumber(j[2]) or -1, 0}
  end
end
local fire = tonumber(ARGV[7])
if ARGV[6] == 'delay' then fire = now + fire end
redis.call('HSET', KEYS[1], 'spec', ARGV[2], 'name', ARGV[3], 'group', ARGV[4], 'priority', ARGV[5],
           'state', 'ACTIVE', 'created_ms', now, 'updated_ms', now, 'next_fire_ms', fire,
           'runs', 0, 'last_run_id', '')
redis.call('ZADD', KEYS[2], now, ARGV[1])
if ARGV[8] ~= '' then
  redis.call('SET', KEYS[4], ARGV[1], 'PX', tonumber(ARGV[9]))
end
if ARGV[10] == '' then
  redis.call('ZADD', KEYS[3], fire, ARGV[1])
  return {ARGV[1], 0, now, fire, 0}
end
redis.call('HSET', KEYS[1], 'state', 'COMPLETED', 'next_fire_ms', '', 'last_run_id', ARGV[10])
redis.call('ZADD', K.job_runs(ARGV[1]), tonumber(ARGV[11]), ARGV[10])
create_run(KEYS[1], ARGV[1], ARGV[10], ARGV[11], now, ARGV, 12)
return {ARGV[1], 0, now, tonumber(ARGV[11]), 1}
