-- reschedule.lua — a fixed-delay job's next fire time, once the run it waited for has ended.
--
-- KEYS[1] job:{job}   KEYS[2] schedule   KEYS[3] awaiting
-- ARGV[1] job id   ARGV[2] run id that ended   ARGV[3] next fire ms (-1: none, the job completes)
-- Returns {status, next_fire_ms}: status 'ok' | 'not_awaiting' (already rescheduled, or the job moved on).
--
-- Only the end of the run the job awaits (its field `awaits`, set by fire.lua; a job that joined `awaiting`
-- before that field existed awaits its last run) counts.
--
-- Invariant: the job leaves `awaiting` exactly once per run, so two masters seeing the same run end
-- cannot schedule two firings.
local v = redis.call('HMGET', KEYS[1], 'state', 'last_run_id', 'awaits')
if not v[1] or (v[3] or v[2]) ~= ARGV[2] or redis.call('SREM', KEYS[3], ARGV[1]) == 0 then
  return {'not_awaiting', -1}
end
redis.call('HDEL', KEYS[1], 'awaits')
local next_fire = tonumber(ARGV[3])
if next_fire >= 0 then
  redis.call('HSET', KEYS[1], 'next_fire_ms', next_fire)
  if v[1] == 'ACTIVE' then redis.call('ZADD', KEYS[2], next_fire, ARGV[1]) end
else
  redis.call('HSET', KEYS[1], 'next_fire_ms', '')
  if may('job', v[1], 'COMPLETED') then redis.call('HSET', KEYS[1], 'state', 'COMPLETED') end
  if v[1] == 'PAUSED' then redis.call('ZREM', K.jobs_paused, ARGV[1]) end
end
return {'ok', next_fire}
