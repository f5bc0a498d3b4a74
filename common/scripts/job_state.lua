-- job_state.lua — pause or resume a job.
--
-- KEYS[1] job:{job}   KEYS[2] schedule
-- ARGV[1] job id   ARGV[2] target state: 'PAUSED' | 'ACTIVE'
-- ARGV[3] (resume) next fire ms to put back in the schedule; -1 keeps the stored next_fire_ms
-- Returns {status, state, next_fire_ms}: status 'ok' | 'unchanged' | 'illegal' | 'missing'.
--
-- Invariant: a paused job has no schedule entry (nothing can fire it) but keeps next_fire_ms, so a
-- resume knows what was missed and applies the misfire policy to it. A paused job is in jobs:paused (the
-- listing of paused jobs reads it), with its score in jobs.
if ARGV[2] ~= 'PAUSED' and ARGV[2] ~= 'ACTIVE' then
  return redis.error_reply('job_state.lua: a job is set PAUSED or ACTIVE, not ' .. tostring(ARGV[2]))
end
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing', '', -1} end
local next_fire = tonumber(redis.call('HGET', KEYS[1], 'next_fire_ms')) or -1
if state == ARGV[2] then return {'unchanged', state, next_fire} end
if not may('job', state, ARGV[2]) then return {'illegal', state, next_fire} end
local now = now_ms()
if ARGV[2] == 'PAUSED' then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZADD', K.jobs_paused, redis.call('ZSCORE', K.jobs, ARGV[1]) or now, ARGV[1])
else
  redis.call('ZREM', K.jobs_paused, ARGV[1])
  if tonumber(ARGV[3]) >= 0 then next_fire = tonumber(ARGV[3]) end
  if next_fire >= 0 then
    redis.call('ZADD', KEYS[2], next_fire, ARGV[1])
    redis.call('HSET', KEYS[1], 'next_fire_ms', next_fire)
  end
end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'updated_ms', now)
return {'ok', ARGV[2], next_fire}
