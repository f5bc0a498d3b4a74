-- submit.lua — store new jobs (a bulk submit in one call) with their first fire times, at most once per
-- idempotency key.
--
-- KEYS[1] jobs   KEYS[2] schedule
-- ARGV[1] JSON {specs, blocks, jobs}: specs the stored spec texts (protobuf, master/records.py) and blocks the run
--         blocks of create_run (lib.lua) that the jobs share, jobs a list of [id, spec index, mode, value,
--         idem, run, scheduled, block index, bundle digest ('' for none)] (indexes from 0): mode 'abs' (value is epoch ms) | 'delay'
--         (value is ms from Redis TIME now) | 'after' (a child job: value is its parent's job id; it has no
--         schedule entry, a parent's run end fires it — see master/children.py) | 'manual' (no schedule entry:
--         only a trigger, a backfill or a rerun makes its runs); then, for a pipeline, its step jobs (see
--         below); idem the client's idempotency key ('' for none); run a run id
--         to create at once ('' for none: the job waits in the schedule), with its scheduled ms and block
--         — a one-shot job due now fires here, in the same step as its submission: it is COMPLETED (no
--         more firings) with its run already queued.
--         A child job's block index names its runs' block (master/children.py), stored as its cblock.
--         names (optional) the jobs' names, in the order of jobs, indexed in P:name:{name} ('' for none).
-- ARGV[2] idempotency TTL ms
-- Returns per job a flat group of 5: job id, duplicate (0|1, or 2: the id is taken by another job —
-- nothing was written, submit again with a new id; 3: a child job's parent does not exist — nothing was
-- written; 4: the job's bundle is not stored, the collector deleted it since the master checked — nothing
-- was written, upload it again), created_ms, next_fire_ms, run created (0|1).
--
-- Invariant: a job is written together with its schedule entry, its run, or its place among its parent's
-- children (never without), and with its reference to its bundle (P:bundle:{digest}:jobs) while the
-- bundle exists: bundle_gc.lua runs either before this step (the submit is refused) or after it (it sees
-- the reference), never between. A key maps to one job for its TTL, so a client retrying a submit after a
-- lost reply gets the same job. A child is written only while its parent exists (delete_job.lua refuses a
-- parent with children), so a child never names a parent that is gone.
--
-- Idempotency keys are kept in hashes, one per period of the TTL and bucket of keys (the first four hex
-- digits of the key's SHA-1): field key → '{expiry ms}:{job id}'. A key written in period p expires within
-- period p + 1, so a lookup reads the current period's bucket and the one before, and a bucket expires
-- whole at the end of period p + 1. Small hashes are one compact allocation each in Redis: ~75 B a key
-- against ~160 B for a string key with its own expiry (issue #23: a million jobs submitted in a day). A
-- change of the TTL setting changes the periods: keys of the old one are no longer found.
--
-- A retry that finds its key used rewrites the key as it is (same value, same expiry): a write that changes
-- nothing, so that a WAIT sent after this call on the same connection (--redis-min-replicas) covers the
-- job it returns. WAIT's contract counts only the writes of its own connection, and a retry may come on
-- one that never wrote the job (another master's, a restarted one's, another of the pool); the rewrite is
-- replicated after the job, so a replica that has it has the job too.
local now = now_ms()
local ttl = tonumber(ARGV[2])
local period = math.floor(now / ttl)

-- The hash of a key's bucket in period p.
local function idem_hash(bucket, p)
  return K.idem(string.format('%d:%s', p, bucket))
end

-- The job id a key names, with the hash and the entry that hold it; nil when unused or expired.
local function idem_get(idem, bucket)
  for p = period, period - 1, -1 do
    local key = idem_hash(bucket, p)
    local entry = redis.call('HGET', key, idem)
    local sep = entry and entry:find(':', 1, true)
    if sep and tonumber(entry:sub(1, sep - 1)) > now then return entry:sub(sep + 1), key, entry end
  end
end

local function idem_put(idem, bucket, id)
  local key = idem_hash(bucket, period)
  redis.call('HSET', key, idem, string.format('%d:%s', now + ttl, id))
  redis.call('PEXPIRE', key, (period + 2) * ttl - now)
end

local out = {}
local bulk = cjson.decode(ARGV[1])
for i, j in ipairs(bulk.jobs) do
  local id, spec, mode, fire, idem, run, scheduled = j[1], bulk.specs[j[2] + 1], j[3], j[4], j[5], j[6], j[7]
  local bundle = j[9]
  local bucket, existing, idem_key, idem_entry
  if idem ~= '' then
    bucket = redis.sha1hex(idem):sub(1, 4)  -- once per key: a new job's entry goes in the same bucket
    existing, idem_key, idem_entry = idem_get(idem, bucket)
  end
  if existing and redis.call('EXISTS', K.job(existing)) == 1 then
    redis.call('HSET', idem_key, idem, idem_entry)
    local v = redis.call('HMGET', K.job(existing), 'created_ms', 'next_fire_ms')
    push(out, existing, 1, tonumber(v[1]), tonumber(v[2]) or -1, 0)
  elseif redis.call('EXISTS', K.job(id)) == 1 then
    push(out, id, 2, 0, -1, 0)
  elseif mode == 'after' and redis.call('EXISTS', K.job(fire)) == 0 then
    push(out, id, 3, 0, -1, 0)
  elseif bundle ~= '' and redis.call('EXISTS', K.bundle(bundle)) == 0 then
    push(out, id, 4, 0, -1, 0)
  else
    local job_key = K.job(id)
    if mode == 'delay' then fire = now + fire end
    redis.call('ZADD', KEYS[1], now, id)
    if idem ~= '' then idem_put(idem, bucket, id) end
    if bundle ~= '' then redis.call('SADD', K.bundle_jobs(bundle), id) end
    local name = bulk.names and bulk.names[i] or ''
    if name ~= '' then
      name_add(name, id, now)
      redis.call('HSET', job_key, 'name', name)
    end
    -- A pipeline's step jobs (j[10]: [id, spec index, bundle digest] each) are stored with it, never alone.
    if j[10] and #j[10] > 0 then redis.call('ZADD', K.jobs_pipelines, now, id) end
    for _, step in ipairs(j[10] or {}) do
      redis.call('HSET', K.job(step[1]), 'spec', bulk.specs[step[2] + 1], 'state', 'ACTIVE', 'created_ms', now,
                 'updated_ms', now, 'pipeline', id)
      redis.call('ZADD', KEYS[1], now, step[1])
      redis.call('SADD', K.job_steps(id), step[1])
      if step[3] ~= '' then
        redis.call('SADD', K.bundle_jobs(step[3]), step[1])
        redis.call('HSET', K.job(step[1]), 'bundle', step[3])
      end
    end
    if mode == 'manual' then
      redis.call('HSET', job_key, 'spec', spec, 'state', 'ACTIVE', 'created_ms', now, 'updated_ms', now)
      push(out, id, 0, now, -1, 0)
    elseif mode == 'after' then
      redis.call('HSET', job_key, 'spec', spec, 'state', 'ACTIVE', 'created_ms', now, 'updated_ms', now,
                 'after', fire, 'cblock', cjson.encode(bulk.blocks[j[8] + 1]))
      redis.call('SADD', K.job_children(fire), id)
      redis.call('SADD', K.parents, fire)
      push(out, id, 0, now, -1, 0)
    elseif run == '' then
      redis.call('HSET', job_key, 'spec', spec, 'state', 'ACTIVE', 'created_ms', now, 'updated_ms', now,
                 'next_fire_ms', fire)
      redis.call('ZADD', KEYS[2], fire, id)
      push(out, id, 0, now, fire, 0)
    else
      redis.call('HSET', job_key, 'spec', spec, 'state', 'COMPLETED', 'created_ms', now, 'updated_ms', now,
                 'runs', 1, 'last_run_id', run)
      redis.call('ZADD', K.job_runs(id), scheduled, run)
      create_run(job_key, id, run, scheduled, now, bulk.blocks[j[8] + 1], true)
      push(out, id, 0, now, scheduled, 1)
    end
  end
end
return out
