-- retention.lua — delete history beyond the retention bounds, a bounded batch per call.
--
-- KEYS[1] jobs   KEYS[2] purge
-- ARGV[1] cursor: the rank in `jobs` where this call's scan of jobs starts (0: from the newest)
-- ARGV[2] jobs looked at per call   ARGV[3] keep runs: ended runs a job keeps, newest first
-- ARGV[4] max age ms: ended runs that ended longer ago, and ended jobs last changed longer ago (with no
--         run ending since), are deleted   ARGV[5] budget: most keys deleted per call
-- Returns {next cursor (0: the scan of jobs wrapped around), runs deleted, jobs deleted, keys deleted,
--          more (1: the budget ran out, or a job was unlinked and awaits its purge: call again at once)}.
--
-- Each call first purges deleted jobs (`purge`: their hash is gone, their runs are left), oldest first,
-- then scans jobs from the cursor: an ended job (COMPLETED or CANCELLED, no active run) older than the max
-- age is unlinked like a deleted one (lib.lua unlink_job) and purged by later calls; of the others, ended
-- runs beyond the newest `keep` ended ones, and ended runs older than the max age, are deleted. A run is
-- deleted with its tasks, their attempts and every index entry naming them (ready, delayed, leases,
-- timeouts, a worker's leases, its run's gate, its job's runs); a run with more tasks than the budget loses
-- them from the highest index down over several calls (its task_count follows).
--
-- A paused job missing from jobs:paused, and a pipeline missing from jobs:pipelines (made by a version that kept
-- no such index), is added to it.
--
-- A job updated since its submit (spec_v > 1) then loses the replaced specs (spec@{version}) that none of
-- its remaining runs was made from (a run without spec_v was made from version 1).
--
-- Invariant: only terminal runs are deleted (never one in its job's active set), and never the run its job
-- names as last_run_id or awaits, so nothing live refers to a deleted key; every call deletes at most
-- about `budget` keys, so Redis is never held for long.
local now = now_ms()
local cursor, per_call, keep = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local cutoff = now - tonumber(ARGV[4])
local budget = tonumber(ARGV[5])
local runs_deleted, jobs_deleted, keys_deleted = 0, 0, 0

local function terminal(kind, state)
  return state ~= false and state ~= nil and EDGES[kind][state] ~= nil and next(EDGES[kind][state]) == nil
end

-- Delete run `run_id` of job `job_id` (terminal): its tasks from the highest index down while the budget
-- lasts, then the run with the keys it has: a capped run's gate, a pipeline run's steps. A pipeline run
-- (field graph) has no tasks: its task_count counts its steps, whose runs are runs of the step jobs,
-- deleted with those jobs' history. Returns true when the run is gone.
local function delete_run(job_id, run_id)
  local rkey = K.run(run_id)
  local v = redis.call('HMGET', rkey, 'task_count', 'graph', 'max_concurrent')
  local n = v[2] and 0 or tonumber(v[1] or '0')
  while n > 0 and budget > 2 do
    n = n - 1
    local id = task_id(run_id, n)
    local t = redis.call('HMGET', K.task(id), 'group', 'worker')
    if t[1] then redis.call('ZREM', K.ready(t[1]), id) end
    if t[2] and t[2] ~= '' then redis.call('SREM', K.worker_leases(t[2]), id) end
    redis.call('ZREM', K.leases, id)
    redis.call('ZREM', K.timeouts, id)
    redis.call('ZREM', K.delayed, id)
    local gone = redis.call('DEL', K.task(id), K.attempts(id))
    keys_deleted = keys_deleted + gone
    budget = budget - 2
  end
  if n > 0 then
    redis.call('HSET', rkey, 'task_count', n)
    return false
  end
  local own = v[2] and K.run_steps(run_id) or (v[3] and K.run_gate(run_id))
  keys_deleted = keys_deleted + (own and redis.call('DEL', rkey, own) or redis.call('DEL', rkey))
  redis.call('ZREM', K.job_runs(job_id), run_id)
  budget = budget - 2
  runs_deleted = runs_deleted + 1
  return true
end

-- Deleted jobs: every run goes (all ended before the job was deleted), then the job's runs index.
local purging = false  -- a deleted job's purge stopped short of its end (the budget ran out)
while budget > 0 do
  local first = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not first then break end
  local runs = K.job_runs(first)
  for _, run_id in ipairs(redis.call('ZRANGE', runs, 0, budget - 1)) do
    if not delete_run(first, run_id) then break end
  end
  if redis.call('ZCARD', runs) > 0 then
    purging = true
    break
  end
  redis.call('DEL', runs)
  redis.call('ZREM', KEYS[2], first)
end

-- Jobs from the cursor: ended jobs past the max age, and ended runs beyond the bounds. A run's score is its
-- scheduled time, and a run ends after it: past the excess, runs scheduled after the cutoff are all younger.
local page = budget > 0 and redis.call('ZREVRANGE', KEYS[1], cursor, cursor + per_call - 1) or {}
local scanned, unlinked = 0, 0
for _, job_id in ipairs(page) do
  if budget <= 0 then break end
  local j = redis.call('HMGET', K.job(job_id), 'state', 'updated_ms', 'last_run_id', 'awaits', 'spec_v')
  local runs = K.job_runs(job_id)
  local active = redis.call('SCARD', K.job_active(job_id))
  local last_end = 0
  if j[3] then last_end = tonumber(redis.call('HGET', K.run(j[3]), 'finished_ms') or '0') end
  if terminal('job', j[1]) and active == 0 and tonumber(j[2] or '0') < cutoff and last_end < cutoff then
    unlink_job(job_id, now)
    jobs_deleted, unlinked, scanned = jobs_deleted + 1, unlinked + 1, scanned + 1
    keys_deleted, budget = keys_deleted + 1, budget - 1
  else
    if j[1] == 'PAUSED' then redis.call('ZADD', K.jobs_paused, 'NX', redis.call('ZSCORE', KEYS[1], job_id), job_id) end
    if redis.call('EXISTS', K.job_steps(job_id)) == 1 then
      redis.call('ZADD', K.jobs_pipelines, 'NX', redis.call('ZSCORE', KEYS[1], job_id), job_id)
    end
    local excess = redis.call('ZCARD', runs) - active - keep
    local complete = true
    local listed = redis.call('ZRANGE', runs, 0, budget - 1, 'WITHSCORES')
    for i = 1, #listed, 2 do
      local run_id, scheduled = listed[i], tonumber(listed[i + 1])
      if excess <= 0 and scheduled >= cutoff then break end
      if budget <= 0 then complete = false break end
      local r = redis.call('HMGET', K.run(run_id), 'state', 'finished_ms')
      local ended = terminal('run', r[1]) and redis.call('SISMEMBER', K.job_active(job_id), run_id) == 0
      if ended and run_id ~= j[3] and run_id ~= j[4] and (excess > 0 or tonumber(r[2] or '0') < cutoff) then
        if not delete_run(job_id, run_id) then complete = false break end
        excess = excess - 1
      end
    end
    if complete then
      scanned = scanned + 1
      local current = tonumber(j[5] or '1')
      if current > 1 then
        local oldest = current
        for _, run_id in ipairs(redis.call('ZRANGE', runs, 0, -1)) do
          oldest = math.min(oldest, tonumber(redis.call('HGET', K.run(run_id), 'spec_v') or '1'))
        end
        for version = 1, oldest - 1 do redis.call('HDEL', K.job(job_id), 'spec@' .. version) end
      end
    end
  end
end
local more = (budget <= 0 or purging or unlinked > 0) and 1 or 0  -- a job unlinked here is purged by the next call
local next_cursor = cursor + scanned - unlinked
if more == 0 and #page < per_call then next_cursor = 0 end
return {next_cursor, runs_deleted, jobs_deleted, keys_deleted, more}
