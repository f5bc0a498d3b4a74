-- fire.lua — firings of jobs, a batch in one call (the preloader's due entries, a trigger, a backfill): for
-- each, create the run and its READY tasks, and advance the schedule.
--
-- ARGV[1] JSON {blocks, fires}: blocks the run blocks of create_run (lib.lua) that the firings share, fires a
--         list of [job id, run id, scheduled ms, expected, next, overlap, skip reason, block index (from 0),
--         max runs, spec version, max active], each field as below. One script for the batch: the library
--         above is run once, not once per firing, and the firings of a second of due jobs share their blocks.
--   expected: 'manual' (a user's trigger, a rerun, a backfill step; the schedule is left alone) or the schedule
--         entry's expected time in ms: the firing happens only if the entry still says so, and the schedule advances
--         (it may differ from the scheduled ms when a misfire plan fires a later time than the one that was due)
--   next: next fire ms after this one (-1: none, the job completes; -2: after a run ends, for
--         fixed-delay jobs — the job joins `awaiting` and its field `awaits` names the run whose end it
--         waits for: this run, or, if this firing is skipped by overlap forbid, the active run that blocked
--         it; ignored in manual mode)
--   overlap: 'allow' | 'forbid' (skip while a run is active) | 'replace' (caller cancelled)
--   skip reason: non-empty records this firing as a SKIPPED run with no tasks (misfire skip)
--   max runs: the job's (0: no limit; ignored in manual mode)
--   spec version: the one the firing was planned with (the job's field spec_v; absent = 1)
--   max active: with overlap 'forbid', how many runs of the job may be active before a firing is skipped
-- Returns per firing a flat group of 3: status, fired_ms, run state; status: created | skipped | exists | stale |
-- inactive | exhausted | changed (the job's spec was updated since the firing was planned: plan it again) |
-- failed (the firing raised an error, which takes the run state's place; for stale, the entry's time now, '' for
-- none, takes it: the caller arms that). A
-- created run is SCHEDULED, or SUCCEEDED when it has no tasks (it ended as it was created: see create_run).
-- `exists`: the run was made already (a manual trigger on the same millisecond, or a firing whose reply was
-- lost); a scheduled firing still advances the schedule past it. `exhausted`: the job has made its max runs
-- (manual ones count) since the firing was planned: no run, the job completes. Firings of one call are
-- handled in order, each on what the ones before it wrote.
--
-- Invariant: a (job, scheduled time) pair yields at most one run whoever fires it (SETNX semantics on
-- the run key), and the schedule entry moves forward in the same step, so a firing is never lost
-- between "run created" and "schedule advanced"; the run count is checked here, where it cannot change
-- under the firing, so a job never has more than max runs from its schedule. A fixed-delay job joins `awaiting` for a run whose end
-- is still to come and will be reported like any run's (its new run, or the active run that blocked it),
-- not for a skipped run that has ended already; a manual firing leaves `awaits` alone (it changes only
-- last_run_id, what a user sees as the job's latest run).
local function fire(f, block, now)
  local job_id, run_id, scheduled, expected = f[1], f[2], f[3], f[4]
  local job_key, run_key = K.job(job_id), K.run(run_id)
  local job_state = redis.call('HGET', job_key, 'state')
  if not job_state then return {'inactive', now, ''} end
  local manual = expected == 'manual'
  if manual then
    if job_state == 'CANCELLED' then return {'inactive', now, ''} end
  else
    if job_state ~= 'ACTIVE' then return {'inactive', now, ''} end
    local due = redis.call('ZSCORE', K.schedule, job_id)
    if not due or tonumber(due) ~= tonumber(expected) then return {'stale', now, due or ''} end
  end
  if tonumber(redis.call('HGET', job_key, 'spec_v') or '1') ~= tonumber(f[10]) then
    return {'changed', now, ''}
  end
  local exists = redis.call('EXISTS', run_key) == 1
  if manual then
    if exists then return {'exists', now, redis.call('HGET', run_key, 'state')} end
  else
    local max_runs = tonumber(f[9])
    if max_runs > 0 and tonumber(redis.call('HGET', job_key, 'runs') or '0') >= max_runs then
      redis.call('ZREM', K.schedule, job_id)
      local fields = {'updated_ms', now, 'next_fire_ms', ''}
      if may('job', job_state, 'COMPLETED') then push(fields, 'state', 'COMPLETED') end
      redis.call('HSET', job_key, unpack(fields))
      return {'exhausted', now, ''}
    end
  end

  local skip_reason = f[7]
  local blocker = false  -- the active run an overlap-forbid firing is skipped for
  if not exists and skip_reason == '' and f[6] == 'forbid'
      and redis.call('SCARD', K.job_active(job_id)) >= tonumber(f[11]) then
    blocker = redis.call('SRANDMEMBER', K.job_active(job_id))
    if blocker then skip_reason = 'overlap forbidden: run ' .. blocker .. ' is still active' end
  end

  local job_fields = {'updated_ms', now}
  if not exists then push(job_fields, 'last_run_id', run_id) end
  if not manual then
    local next_fire = tonumber(f[5])
    if next_fire >= 0 then
      redis.call('ZADD', K.schedule, next_fire, job_id)
      push(job_fields, 'next_fire_ms', next_fire)
    elseif next_fire == -2 then
      redis.call('ZREM', K.schedule, job_id)
      redis.call('SADD', K.awaiting, job_id)
      -- A skipped run has ended already (no end of it will be reported), but the run that blocked it will
      -- end. Only a misfire skip (fixed-delay jobs have none) has no such run: the caller reports its end.
      push(job_fields, 'next_fire_ms', '', 'awaits', blocker or run_id)
    else
      redis.call('ZREM', K.schedule, job_id)
      push(job_fields, 'next_fire_ms', '')
      if may('job', job_state, 'COMPLETED') then push(job_fields, 'state', 'COMPLETED') end
    end
  end
  redis.call('HSET', job_key, unpack(job_fields))
  if exists then return {'exists', now, redis.call('HGET', run_key, 'state')} end
  redis.call('ZADD', K.job_runs(job_id), tonumber(scheduled), run_id)

  if skip_reason ~= '' then
    redis.call('HSET', run_key, 'state', 'SKIPPED', 'job_id', job_id, 'scheduled_ms', scheduled,
               'fired_ms', now, 'finished_ms', now, 'task_count', 0, 'succeeded', 0, 'dead', 0,
               'cancelled', 0, 'reason', skip_reason)
    redis.call('HINCRBY', job_key, 'skipped', 1)
    return {'skipped', now, 'SKIPPED'}
  end
  return {'created', now, create_run(job_key, job_id, run_id, scheduled, now, block)}
end

local batch = cjson.decode(ARGV[1])
local now = now_ms()
local out = {}
for _, f in ipairs(batch.fires) do
  -- One firing that raises (a job's data not as the scripts wrote it) fails alone, naming why; the rest of the
  -- batch is fired. What it wrote before the error stays, as it would have without the batch.
  local ok, r = pcall(fire, f, batch.blocks[f[8] + 1], now)
  if ok then
    push(out, r[1], r[2], r[3])
  else
    push(out, 'failed', now, type(r) == 'table' and tostring(r.err) or tostring(r))
  end
end
return out
