-- lib.lua — functions shared by every Sparkyard script.
--
-- Each script is loaded as: generated prelude (K: key builders from sparkyard.keys; EDGES: transition
-- tables from sparkyard.states) .. this file .. the script body. Nothing here formats a key by hand.
--
-- Invariants kept by these functions:
--   * a state changes only along an edge of EDGES (terminal states have none, so they never change);
--   * a task is in exactly one of: ready:{group} (READY), leases (LEASED), delayed (FAILED), none (terminal);
--   * run counters (succeeded/dead/cancelled) count each task once, when it becomes terminal, and the
--     run turns terminal exactly when their sum reaches task_count.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Append values to a flat reply list.
local function push(list, ...)
  for _, x in ipairs({...}) do list[#list + 1] = x end
end

local function may(kind, from, to)
  local e = EDGES[kind][from]
  return e ~= nil and e[to] == true
end

-- Ready-queue score: priority band first (higher priority = lower score), then the run's scheduled
-- time, then (ZSET ties sort by member) the task id, which sorts by job creation and task index.
-- 2^42 ms per band keeps every score an exact integer in a double until the year 2109.
local PRIORITY_BAND = 4398046511104
local MAX_PRIORITY = 1000
local function ready_score(priority, scheduled_ms)
  return (MAX_PRIORITY - tonumber(priority)) * PRIORITY_BAND + tonumber(scheduled_ms)
end

-- Only the first AFFINITY_MAX_INDEX task indexes of a job remember their last worker (job field
-- w:{index}); beyond that a backfill's one-off tasks would bloat the job hash for no reuse.
local AFFINITY_MAX_INDEX = 256

local function update_attempt(task_id, number, fields)
  local key = K.attempts(task_id)
  local raw = redis.call('HGET', key, tostring(number))
  if not raw then return end
  local rec = cjson.decode(raw)
  if rec.state ~= 'RUNNING' and fields.state ~= nil then return end
  for k, v in pairs(fields) do rec[k] = v end
  redis.call('HSET', key, tostring(number), cjson.encode(rec))
end

-- Put a task (already moved to READY) back into its group's ready queue.
local function enqueue_ready(task_id, t)
  redis.call('ZADD', K.ready(t.group), t.score, task_id)
  redis.call('SADD', K.groups, t.group)
end

-- Remove every index entry a leased task has (t from load_task; its state must still be LEASED).
local function drop_lease(task_id, t)
  redis.call('ZREM', K.leases, task_id)
  redis.call('ZREM', K.timeouts, task_id)
  if t.worker and t.worker ~= '' then
    redis.call('SREM', K.worker_leases(t.worker), task_id)
  end
  redis.call('HINCRBY', K.run(t.run_id), 'leased', -1)
end

-- Move a run to a terminal state if all its tasks are terminal. Returns the run's terminal state or ''.
local function settle_run(run_id, now)
  local rkey = K.run(run_id)
  local r = redis.call('HMGET', rkey, 'state', 'task_count', 'succeeded', 'dead', 'cancelled', 'job_id')
  if not r[1] then return '' end
  local done = tonumber(r[3]) + tonumber(r[4]) + tonumber(r[5])
  if done < tonumber(r[2]) then return '' end
  local target = 'SUCCEEDED'
  if tonumber(r[4]) > 0 then target = 'FAILED' elseif tonumber(r[5]) > 0 then target = 'CANCELLED' end
  if not may('run', r[1], target) then return '' end
  redis.call('HSET', rkey, 'state', target, 'finished_ms', now)
  redis.call('SREM', K.job_active(r[6]), run_id)
  return target
end

-- Count a task that just became terminal in its run. counter: 'succeeded' | 'dead' | 'cancelled'.
local function task_terminal(run_id, counter, now)
  redis.call('HINCRBY', K.run(run_id), counter, 1)
  return settle_run(run_id, now)
end

-- Read the task fields most scripts need, as a table (nil when the task does not exist).
local TASK_FIELDS = {'state', 'token', 'worker', 'attempts', 'failures', 'lost', 'run_id', 'job_id', 'index', 'group',
                     'score', 'max_attempts', 'backoff_ms', 'backoff_mult', 'backoff_max_ms'}
local function load_task(task_id)
  local v = redis.call('HMGET', K.task(task_id), unpack(TASK_FIELDS))
  if not v[1] then return nil end
  local t = {}
  for i, name in ipairs(TASK_FIELDS) do t[name] = v[i] end
  return t
end

-- A failed attempt (FAILED or TIMED_OUT): retry after the backoff while attempts remain, else DEAD.
-- The task must be LEASED and its lease entries already dropped. Returns new task state, run state,
-- not_before_ms (0 unless retrying).
local function fail_attempt(task_id, t, now, error_text)
  local failures = tonumber(t.failures or '0') + 1
  local tkey = K.task(task_id)
  if failures >= tonumber(t.max_attempts) then
    redis.call('HSET', tkey, 'state', 'DEAD', 'failures', failures, 'error', error_text,
               'worker', '', 'finished_ms', now)
    return 'DEAD', task_terminal(t.run_id, 'dead', now), 0
  end
  local backoff = tonumber(t.backoff_ms) * (tonumber(t.backoff_mult) ^ (failures - 1))
  if backoff > tonumber(t.backoff_max_ms) then backoff = tonumber(t.backoff_max_ms) end
  local not_before = now + math.floor(backoff)
  redis.call('HSET', tkey, 'state', 'FAILED', 'failures', failures, 'error', error_text,
             'prev_worker', t.worker, 'worker', '', 'not_before_ms', not_before)
  redis.call('ZADD', K.delayed, not_before, task_id)
  return 'FAILED', '', not_before
end

-- A lease that ended without a result (expired, or the worker came back without the task):
-- requeue with the previous worker remembered, or DEAD once the task was lost more than max_lost times.
local function lose_lease(task_id, t, now, max_lost, reason)
  drop_lease(task_id, t)
  update_attempt(task_id, t.attempts, {state = 'LOST', finished_ms = now, error = reason})
  local lost = tonumber(t.lost or '0') + 1
  local tkey = K.task(task_id)
  if lost > max_lost then
    redis.call('HSET', tkey, 'state', 'DEAD', 'lost', lost, 'worker', '', 'finished_ms', now,
               'error', 'lost ' .. lost .. ' times (last: ' .. reason .. ')')
    return 'DEAD', task_terminal(t.run_id, 'dead', now)
  end
  redis.call('HSET', tkey, 'state', 'READY', 'lost', lost, 'prev_worker', t.worker, 'worker', '')
  enqueue_ready(task_id, t)
  return 'READY', ''
end
