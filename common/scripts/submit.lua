-- submit.lua — store new jobs (a bulk submit in one call) with their first fire times, at most once per
-- idempotency key.
--
-- KEYS[1] jobs   KEYS[2] schedule
-- ARGV[1] JSON list of jobs, each {id, spec (protobuf, base64), mode, value, idem, run, scheduled, block}:
--         mode 'abs' (value is epoch ms) | 'delay' (value is ms from Redis TIME now); idem the client's idempotency key ('' for none); run a run id to create at once ('' for
--         none: the job waits in the schedule), with its scheduled ms and create_run's block (lib.lua) —
--         a one-shot job due now fires here, in the same step as its submission: it is COMPLETED (no more
--         firings) with its run already queued.
-- ARGV[2] idempotency TTL ms
-- Returns per job a flat group of 5: job id, duplicate (0|1, or 2: the id is taken by another job —
-- nothing was written, submit again with a new id), created_ms, next_fire_ms, run created (0|1).
--
-- Invariant: a job is written together with its schedule entry or its run (never without), and a key
-- maps to one job for its TTL, so a client retrying a submit after a lost reply gets the same job.
local now = now_ms()
local ttl = tonumber(ARGV[2])
local out = {}
for _, j in ipairs(cjson.decode(ARGV[1])) do
  local existing = j.idem ~= '' and redis.call('GET', K.idem(j.idem))
  if existing and redis.call('EXISTS', K.job(existing)) == 1 then
    local v = redis.call('HMGET', K.job(existing), 'created_ms', 'next_fire_ms')
    push(out, existing, 1, tonumber(v[1]), tonumber(v[2]) or -1, 0)
  elseif redis.call('EXISTS', K.job(j.id)) == 1 then
    push(out, j.id, 2, 0, -1, 0)
  else
    local job_key = K.job(j.id)
    local fire = j.value
    if j.mode == 'delay' then fire = now + fire end
    redis.call('ZADD', KEYS[1], now, j.id)
    if j.idem ~= '' then redis.call('SET', K.idem(j.idem), j.id, 'PX', ttl) end
    if j.run == '' then
      redis.call('HSET', job_key, 'spec', j.spec, 'state', 'ACTIVE', 'created_ms', now, 'updated_ms', now,
                 'next_fire_ms', fire)
      redis.call('ZADD', KEYS[2], fire, j.id)
      push(out, j.id, 0, now, fire, 0)
    else
      redis.call('HSET', job_key, 'spec', j.spec, 'state', 'COMPLETED', 'created_ms', now, 'updated_ms', now,
                 'runs', 1, 'last_run_id', j.run)
      redis.call('ZADD', K.job_runs(j.id), j.scheduled, j.run)
      create_run(job_key, j.id, j.run, j.scheduled, now, j.block, true)
      push(out, j.id, 0, now, j.scheduled, 1)
    end
  end
end
return out
