-- update.lua — change a job's spec (sparkyard update), effective from its next firing.
--
-- KEYS[1] job:{job}   KEYS[2] schedule   KEYS[3] awaiting
-- ARGV[1] job id   ARGV[2] the spec version the new spec was made from (the caller read it, then merged
--         the change into it)   ARGV[3] the new spec text   ARGV[4] next fire ms for a new schedule (-1:
--         the schedule is unchanged)   ARGV[5] the digest of the new spec's bundle ('' for none)
-- ARGV[6] a pipeline's new step jobs, JSON [[id, spec text, bundle digest ('' for none)], ...] ([] for a job)
-- ARGV[7] a child job's new run block (master/children.py; '' for other jobs)
-- ARGV[8] the new spec's name (moves the job's entry in P:name:{name}; absent: unchanged)
-- Returns {status, state, spec version, next_fire_ms}: status 'ok' | 'missing' | 'ended' (the job is
-- COMPLETED or CANCELLED: it fires no more) | 'conflict' (another update came first: read it again) |
-- 'bundle_missing' (the new spec's bundle is not stored: upload it again; nothing was written).
--
-- Invariant: a job's spec changes only here, one version at a time, and the version it replaces is kept
-- as field spec@{version} (runs made before keep theirs: a run records its version as spec_v when it is
-- not 1). A new schedule replaces the old entry in the same step, so the old fire time can never fire
-- after the update: fire.lua fires only an entry that still says what it planned from, and only with the
-- spec version it planned with. The job's reference to its bundle is written in the same step, and only
-- while the bundle exists, so bundle_gc.lua can never delete a bundle between an update and its
-- reference. A paused job keeps no entry (job_state.lua): only its next_fire_ms moves.
local v = redis.call('HMGET', KEYS[1], 'state', 'spec_v', 'spec', 'next_fire_ms')
if not v[1] then return {'missing', '', 0, -1} end
local version = tonumber(v[2] or '1')
local next_fire = tonumber(v[4]) or -1
if v[1] ~= 'ACTIVE' and v[1] ~= 'PAUSED' then return {'ended', v[1], version, next_fire} end
if version ~= tonumber(ARGV[2]) then return {'conflict', v[1], version, next_fire} end
local bundle = ARGV[5]
if bundle ~= '' and redis.call('EXISTS', K.bundle(bundle)) == 0 then
  return {'bundle_missing', v[1], version, next_fire}
end
local now = now_ms()
-- A pipeline's new version comes with new step jobs (a run in progress keeps the ones it was fired with). (An
-- update cannot make a job a pipeline nor a pipeline a job: one has an entrypoint, the other steps.) A pipeline
-- made by a version before the index of pipelines joins it here, as at retention's next pass.
local steps = cjson.decode(ARGV[6])
for _, step in ipairs(steps) do
  if step[3] ~= '' and redis.call('EXISTS', K.bundle(step[3])) == 0 then
    return {'bundle_missing', v[1], version, next_fire}
  end
end
if bundle ~= '' then redis.call('SADD', K.bundle_jobs(bundle), ARGV[1]) end
if #steps > 0 then
  redis.call('ZADD', K.jobs_pipelines, 'NX', redis.call('ZSCORE', K.jobs, ARGV[1]) or now, ARGV[1])
end
for _, step in ipairs(steps) do
  redis.call('HSET', K.job(step[1]), 'spec', step[2], 'state', 'ACTIVE', 'created_ms', now, 'updated_ms', now,
             'pipeline', ARGV[1])
  redis.call('ZADD', K.jobs, now, step[1])
  redis.call('SADD', K.job_steps(ARGV[1]), step[1])
  if step[3] ~= '' then
    redis.call('SADD', K.bundle_jobs(step[3]), step[1])
    redis.call('HSET', K.job(step[1]), 'bundle', step[3])
  end
end
local fields = {'spec@' .. version, v[3], 'spec', ARGV[3], 'spec_v', version + 1, 'spec_ms', now, 'updated_ms', now}
if ARGV[7] ~= '' then push(fields, 'cblock', ARGV[7]) end  -- a child job's runs are made from the new version
if tonumber(ARGV[4]) >= 0 then
  next_fire = tonumber(ARGV[4])
  push(fields, 'next_fire_ms', next_fire)
  if v[1] == 'ACTIVE' then redis.call('ZADD', KEYS[2], next_fire, ARGV[1]) end
  -- A fixed-delay job waiting for its run's end has a fire time again: it waits no more.
  redis.call('SREM', KEYS[3], ARGV[1])
  redis.call('HDEL', KEYS[1], 'awaits')
end
local old_name = redis.call('HGET', KEYS[1], 'name') or ''
local new_name = ARGV[8] or old_name
if new_name ~= old_name then
  if old_name ~= '' then name_remove(old_name, ARGV[1]) end
  if new_name ~= '' then name_add(new_name, ARGV[1], tonumber(redis.call('HGET', KEYS[1], 'created_ms'))) end
end
if new_name ~= '' then push(fields, 'name', new_name) else redis.call('HDEL', KEYS[1], 'name') end
redis.call('HSET', KEYS[1], unpack(fields))
return {'ok', v[1], version + 1, next_fire}
