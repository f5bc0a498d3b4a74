-- fire.lua — one firing of a job: create the run and its READY tasks, and advance the schedule.
--
-- KEYS[1] job:{job}   KEYS[2] run:{run}   KEYS[3] job:{job}:runs   KEYS[4] job:{job}:active
-- KEYS[5] schedule    KEYS[6] ready:{group}   KEYS[7] groups
-- ARGV[1] job id   ARGV[2] run id   ARGV[3] scheduled ms
-- ARGV[4] 'manual' (a user's trigger, a rerun, a backfill step; the schedule is left alone) or the schedule
--         entry's expected time in ms: the firing happens only if the entry still says so, and the schedule advances
--         (it may differ from ARGV[3] when a misfire plan fires a later time than the one that was due)
-- ARGV[5] next fire ms after this one (-1: none, the job completes; -2: after a run ends, for
--         fixed-delay jobs — the job joins `awaiting` and its field `awaits` names the run whose end it
--         waits for: this run, or, if this firing is skipped by overlap forbid, the active run that blocked
--         it; ignored in manual mode)
-- ARGV[6] overlap policy: 'allow' | 'forbid' (skip while a run is active) | 'replace' (caller cancelled)
-- ARGV[7] skip reason: non-empty records this firing as a SKIPPED run with no tasks (misfire skip)
-- ARGV[8] the run block of create_run (lib.lua, JSON): settings and tasks.
-- ARGV[9] the job's max runs (0: no limit; ignored in manual mode)
-- ARGV[10] the spec version the firing was planned with (the job's field spec_v; absent = 1)
-- ARGV[11] with overlap 'forbid': how many runs of the job may be active before a firing is skipped
-- Returns {status, fired_ms, run state}; status: created | skipped | exists | stale | inactive |
-- exhausted | changed (the job's spec was updated since the firing was planned: plan it again). A created run is SCHEDULED, or SUCCEEDED when it has no tasks (it ended as it was created:
-- see create_run). `exists`: the run was made already (a manual trigger on the same millisecond, or a
-- firing whose reply was lost); a scheduled firing still advances the schedule past it. `exhausted`: the
-- job has made its max runs (manual ones count) since the firing was planned: no run, the job completes.
--
-- Invariant: a (job, scheduled time) pair yields at most one run whoever fires it (SETNX semantics on
-- the run key), and the schedule entry moves forward in the same step, so a firing is never lost
-- between "run created" and "schedule advanced"; the run count is checked here, where it cannot change
-- under the firing, so a job never has more than max runs from its schedule. A fixed-delay job joins `awaiting` for a run whose end
-- is still to come and will be reported like any run's (its new run, or the active run that blocked it),
-- not for a skipped run that has ended already; a manual firing leaves `awaits` alone (it changes only
-- last_run_id, what a user sees as the job's latest run).
local now = now_ms()
local job_state = redis.call('HGET', KEYS[1], 'state')
if not job_state then return {'inactive', now, ''} end
local manual = ARGV[4] == 'manual'
if manual then
  if job_state == 'CANCELLED' then return {'inactive', now, ''} end
else
  if job_state ~= 'ACTIVE' then return {'inactive', now, ''} end
  local due = redis.call('ZSCORE', KEYS[5], ARGV[1])
  if not due or tonumber(due) ~= tonumber(ARGV[4]) then return {'stale', now, ''} end
end
if tonumber(redis.call('HGET', KEYS[1], 'spec_v') or '1') ~= tonumber(ARGV[10]) then
  return {'changed', now, ''}
end
local exists = redis.call('EXISTS', KEYS[2]) == 1
if manual then
  if exists then return {'exists', now, redis.call('HGET', KEYS[2], 'state')} end
else
  local max_runs = tonumber(ARGV[9])
  if max_runs > 0 and tonumber(redis.call('HGET', KEYS[1], 'runs') or '0') >= max_runs then
    redis.call('ZREM', KEYS[5], ARGV[1])
    local fields = {'updated_ms', now, 'next_fire_ms', ''}
    if may('job', job_state, 'COMPLETED') then push(fields, 'state', 'COMPLETED') end
    redis.call('HSET', KEYS[1], unpack(fields))
    return {'exhausted', now, ''}
  end
end

local skip_reason = ARGV[7]
local blocker = false  -- the active run an overlap-forbid firing is skipped for
if not exists and skip_reason == '' and ARGV[6] == 'forbid'
    and redis.call('SCARD', KEYS[4]) >= tonumber(ARGV[11]) then
  blocker = redis.call('SRANDMEMBER', KEYS[4])
  if blocker then skip_reason = 'overlap forbidden: run ' .. blocker .. ' is still active' end
end

local job_fields = {'updated_ms', now}
if not exists then push(job_fields, 'last_run_id', ARGV[2]) end
if not manual then
  local next_fire = tonumber(ARGV[5])
  if next_fire >= 0 then
    redis.call('ZADD', KEYS[5], next_fire, ARGV[1])
    push(job_fields, 'next_fire_ms', next_fire)
  elseif next_fire == -2 then
    redis.call('ZREM', KEYS[5], ARGV[1])
    redis.call('SADD', K.awaiting, ARGV[1])
    -- A skipped run has ended already (no end of it will be reported), but the run that blocked it will
    -- end. Only a misfire skip (fixed-delay jobs have none) has no such run: the caller reports its end.
    push(job_fields, 'next_fire_ms', '', 'awaits', blocker or ARGV[2])
  else
    redis.call('ZREM', KEYS[5], ARGV[1])
    push(job_fields, 'next_fire_ms', '')
    if may('job', job_state, 'COMPLETED') then push(job_fields, 'state', 'COMPLETED') end
  end
end
redis.call('HSET', KEYS[1], unpack(job_fields))
if exists then return {'exists', now, redis.call('HGET', KEYS[2], 'state')} end
redis.call('ZADD', KEYS[3], tonumber(ARGV[3]), ARGV[2])

if skip_reason ~= '' then
  redis.call('HSET', KEYS[2], 'state', 'SKIPPED', 'job_id', ARGV[1], 'scheduled_ms', ARGV[3],
             'fired_ms', now, 'finished_ms', now, 'task_count', 0, 'succeeded', 0, 'dead', 0,
             'cancelled', 0, 'reason', skip_reason)
  redis.call('HINCRBY', KEYS[1], 'skipped', 1)
  return {'skipped', now, 'SKIPPED'}
end
return {'created', now, create_run(KEYS[1], ARGV[1], ARGV[2], ARGV[3], now, cjson.decode(ARGV[8]))}
