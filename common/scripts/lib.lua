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

-- A run with a concurrency cap keeps its extra tasks in run:{run}:gate (READY, but not yet in the ready
-- queue); each task of the run that ends lets the next gated one in (Doris' desired concurrency).
local function promote_gated(run_id)
  local popped = redis.call('ZPOPMIN', K.run_gate(run_id))
  if popped[1] then
    local v = redis.call('HMGET', K.task(popped[1]), 'state', 'group', 'score')
    if v[1] == 'READY' then redis.call('ZADD', K.ready(v[2]), v[3], popped[1]) end
  end
end

-- Count a task that just became terminal in its run. counter: 'succeeded' | 'dead' | 'cancelled'.
local function task_terminal(run_id, counter, now)
  redis.call('HINCRBY', K.run(run_id), counter, 1)
  promote_gated(run_id)
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

-- Create run `run_id` of job `job_id` (scheduled at `scheduled_ms`) and its READY tasks.
-- The run block is a[b..]: group, priority, max attempts, backoff ms, backoff multiplier, max backoff ms,
-- timeout ms, routing key, max concurrent per run, routing strategy, ready-queue score (priority with
-- aging, computed by the master), task count n, then n pairs (task id, inputs JSON).
-- With a max concurrency c > 0, tasks from index c on wait in run:{run}:gate and enter the ready queue
-- one per task of the run that ends. A task's previous worker starts as the worker that last ran the
-- same task index of the job (job field w:{index}), so a recurring job keeps landing on a warm worker.
local function create_run(job_key, job_id, run_id, scheduled_ms, now, a, b)
  local group, priority, cap, score = a[b], a[b + 1], tonumber(a[b + 8]), tonumber(a[b + 10])
  local n = tonumber(a[b + 11])
  redis.call('HINCRBY', job_key, 'runs', 1)
  redis.call('HSET', K.run(run_id), 'state', 'SCHEDULED', 'job_id', job_id, 'scheduled_ms', scheduled_ms,
             'fired_ms', now, 'task_count', n, 'succeeded', 0, 'dead', 0, 'cancelled', 0, 'leased', 0,
             'max_concurrent', cap, 'reason', '')
  redis.call('SADD', K.job_active(job_id), run_id)
  for i = 0, n - 1 do
    local task_id = a[b + 12 + 2 * i]
    local prev = ''
    if i < AFFINITY_MAX_INDEX then prev = redis.call('HGET', job_key, 'w:' .. i) or '' end
    redis.call('HSET', K.task(task_id), 'state', 'READY', 'run_id', run_id, 'job_id', job_id,
               'index', i, 'group', group, 'priority', priority, 'score', score,
               'inputs', a[b + 13 + 2 * i], 'attempts', 0, 'failures', 0, 'lost', 0, 'token', 0,
               'worker', '', 'prev_worker', prev, 'max_attempts', a[b + 2], 'backoff_ms', a[b + 3],
               'backoff_mult', a[b + 4], 'backoff_max_ms', a[b + 5], 'timeout_ms', a[b + 6],
               'route', a[b + 7], 'routing', a[b + 9])
    if cap > 0 and i >= cap then
      redis.call('ZADD', K.run_gate(run_id), i, task_id)
    else
      redis.call('ZADD', K.ready(group), score, task_id)
    end
  end
  redis.call('SADD', K.groups, group)
end
