-- lib.lua — functions shared by every Sparkyard script.
--
-- Each script is loaded as: generated prelude (K: key builders from sparkyard.keys; EDGES: transition
-- tables from sparkyard.states) .. this file .. (lib_pipelines.lua, for the scripts that can make or end a
-- run) .. the script body. Nothing here formats a key by hand.
--
-- Invariants kept by these functions:
--   * a state changes only along an edge of EDGES (terminal states have none, so they never change): every
--     write of a state is preceded by may(), or may_end_attempt() when an attempt ends;
--   * a task is in exactly one of: ready:{group} (READY), leases (LEASED), delayed (FAILED), none (terminal);
--   * run counters (succeeded/dead/cancelled) count each task once, when it becomes terminal, and the
--     run turns terminal exactly when their sum reaches task_count.

-- The time every deadline is measured against: Redis TIME, shared by all masters. INJECTED_NOW is nil in
-- every script a production master loads; only a RedisStore built with a test clock renders scripts that
-- take it from their last ARGV (master/scripts.py, INJECTED_TIME), so unit tests move time without waiting.
local function now_ms()
  if INJECTED_NOW then return INJECTED_NOW end
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

-- Only tasks of recurring jobs (marked `aff`), and only the first AFFINITY_MAX_INDEX task indexes,
-- remember their last worker (job field w:{index}): a one-shot job has no next run to place, and a
-- backfill's thousands of indexes would bloat the job hash for no reuse.
local AFFINITY_MAX_INDEX = 256

-- A task's latest attempt lives in its own hash: while it runs (number = attempts, token, worker,
-- att_leased_ms, att_started_ms, att_log) and after it ends (att_state, att_finished_ms, att_worker,
-- att_error, att_traceback; its result is the task's `result`). Only when a further attempt is claimed is
-- the ended one archived to task:{task}:attempts, so a task that runs once — nearly all — writes one
-- key, and ending an attempt costs no JSON encoding.
local ATTEMPT_END_FIELDS = {state = 'att_state', finished_ms = 'att_finished_ms', error = 'att_error',
                            traceback = 'att_traceback', log_path = 'att_log', started_ms = 'att_started_ms'}
local ATTEMPT_ARCHIVED = {'attempts', 'token', 'att_worker', 'att_leased_ms', 'att_started_ms', 'att_finished_ms',
                          'att_state', 'att_error', 'att_traceback', 'att_log'}

-- End the task's current attempt with `fields` (keys of ATTEMPT_END_FIELDS; '' values are not written).
-- `extra`: more field/value pairs for the task hash, written in the same HSET.
local function finish_attempt(task_id, t, fields, extra)
  local args = extra or {}
  push(args, 'att_worker', t.worker or '')
  for name, value in pairs(fields) do
    if value ~= '' then push(args, ATTEMPT_END_FIELDS[name], value) end
  end
  redis.call('HSET', K.task(task_id), unpack(args))
end

-- Before a task's next attempt is claimed: move its ended attempt (if any) to task:{task}:attempts and
-- clear the fields that only an ended attempt has. The token is kept as the string HGET gives: cjson
-- encodes numbers with 14 significant digits, which would change a token from 1e14 on.
local function archive_attempt(task_id, tkey)
  local v = redis.call('HMGET', tkey, unpack(ATTEMPT_ARCHIVED))
  if not v[1] or not v[7] then return end
  local rec = {number = tonumber(v[1]), token = v[2], worker = v[3] or '',
               leased_ms = tonumber(v[4]) or 0, started_ms = tonumber(v[5]) or 0,
               finished_ms = tonumber(v[6]) or 0, state = v[7], error = v[8] or '', traceback = v[9] or '',
               log_path = v[10] or ''}
  redis.call('HSET', K.attempts(task_id), v[1], cjson.encode(rec))
  redis.call('HDEL', tkey, 'att_state', 'att_finished_ms', 'att_worker', 'att_error', 'att_traceback')
end

-- Put a task (already moved to READY) back into its group's ready queue.
local function enqueue_ready(task_id, t)
  redis.call('ZADD', K.ready(t.group), t.score, task_id)
  redis.call('SADD', K.groups, t.group)
end

-- Remove every index entry a leased task has (t from load_task; its state must still be LEASED). Only a
-- task whose run has a timeout (field tmo, set by claim) has an entry in `timeouts`.
local function drop_lease(task_id, t)
  redis.call('ZREM', K.leases, task_id)
  if t.tmo then redis.call('ZREM', K.timeouts, task_id) end
  if t.worker and t.worker ~= '' then
    redis.call('SREM', K.worker_leases(t.worker), task_id)
  end
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

local step_ended  -- defined in lib_pipelines.lua: a step's end may make the next steps' runs
local fire_children  -- defined after create_run: a parent run's end fires its child jobs

-- ---- Webhooks (master/webhooks.py) ------------------------------------------------------------------
--
-- Invariant: a run that ends FAILED or SUCCEEDED and wants a webhook for it (its own URL, recorded as
-- the run's `hooks` letters F and S, or the leader's default, K.webhook_defaults) gets its delivery
-- recorded in K.webhooks in the script that ended it, due at once; whoever leads delivers it from there and
-- removes it (webhook.lua), so neither a change of leader nor a master's crash loses it.
local HOOK_LETTER = {FAILED = 'F', SUCCEEDED = 'S'}
local function record_webhook(run_id, state, hooks, now)
  local letter = HOOK_LETTER[state]
  if not letter then return end
  if (hooks and string.find(hooks, letter, 1, true)) or redis.call('HEXISTS', K.webhook_defaults, letter) == 1 then
    redis.call('ZADD', K.webhooks, now, run_id)
  end
end

-- Move a run to a terminal state if all its tasks are terminal. Returns the run's terminal state or ''.
-- A pipeline run counts its steps as a run counts its tasks; a step's run that ends ends its step.
local function settle_run(run_id, now)
  local rkey = K.run(run_id)
  local r = redis.call('HMGET', rkey, 'state', 'task_count', 'succeeded', 'dead', 'cancelled', 'job_id',
                       'max_concurrent', 'prun', 'step', 'scheduled_ms', 'hooks')
  if not r[1] then return '' end
  if r[7] then promote_gated(run_id) end
  local succeeded, dead, cancelled = tonumber(r[3] or 0), tonumber(r[4] or 0), tonumber(r[5] or 0)
  if succeeded + dead + cancelled < tonumber(r[2]) then return '' end
  local target = 'SUCCEEDED'
  if dead > 0 then target = 'FAILED' elseif cancelled > 0 then target = 'CANCELLED' end
  if not may('run', r[1], target) then return '' end
  redis.call('HSET', rkey, 'state', target, 'finished_ms', now)
  redis.call('SREM', K.job_active(r[6]), run_id)
  record_webhook(run_id, target, r[11], now)
  if r[8] then step_ended(r[8], r[9], run_id, target, now) end
  if redis.call('EXISTS', K.job_children(r[6])) == 1 then fire_children(r[6], run_id, target, r[10], now) end
  return target
end

-- Count a task that just became terminal in its run (counter: 'succeeded' | 'dead' | 'cancelled'); a
-- capped run lets its next gated task in.
local function task_terminal(run_id, counter, now)
  redis.call('HINCRBY', K.run(run_id), counter, 1)
  return settle_run(run_id, now)
end

-- Read the task fields most scripts need, as a table (nil when the task does not exist).
local TASK_FIELDS = {'state', 'token', 'worker', 'attempts', 'failures', 'lost', 'run_id', 'job_id', 'index', 'group',
                     'score', 'aff', 'tmo', 'att_state'}
local function load_task(task_id)
  local v = redis.call('HMGET', K.task(task_id), unpack(TASK_FIELDS))
  if not v[1] then return nil end
  local t = {}
  for i, name in ipairs(TASK_FIELDS) do t[name] = v[i] end
  return t
end

-- May the task's current attempt end as `outcome` (an attempt state), taking the task to each of
-- `targets` (the task states that end can lead to)? Both tables are consulted: the attempt must still be
-- RUNNING (att_state is written only when it ends, see finish_attempt) and the task must be where it may
-- move to every target. Either alone has a gap: a FAILED task may move to READY (its backoff ended), and
-- a task never claimed has no ended attempt either.
local function may_end_attempt(t, outcome, targets)
  if not may('attempt', t.att_state or 'RUNNING', outcome) then return false end
  for _, target in ipairs(targets) do
    if not may('task', t.state, target) then return false end
  end
  return true
end

-- A failed attempt (FAILED or TIMED_OUT; `attempt_fields` end it, see finish_attempt): retry after the
-- backoff while attempts remain, else DEAD. A run stores its retry policy only when it has retries
-- (max_attempts absent = 1). The task must be LEASED and its lease entries already dropped. Returns new
-- task state, run state, not_before_ms (0 unless retrying).
local function fail_attempt(task_id, t, now, error_text, attempt_fields)
  local failures = tonumber(t.failures or '0') + 1
  local policy = redis.call('HMGET', K.run(t.run_id), 'max_attempts', 'backoff_ms', 'backoff_mult', 'backoff_max_ms')
  if failures >= tonumber(policy[1] or '1') then
    finish_attempt(task_id, t, attempt_fields, {'state', 'DEAD', 'failures', failures, 'error', error_text,
                                                'worker', '', 'finished_ms', now})
    return 'DEAD', task_terminal(t.run_id, 'dead', now), 0
  end
  local backoff = tonumber(policy[2]) * (tonumber(policy[3]) ^ (failures - 1))
  if backoff > tonumber(policy[4]) then backoff = tonumber(policy[4]) end
  local not_before = now + math.floor(backoff)
  finish_attempt(task_id, t, attempt_fields, {'state', 'FAILED', 'failures', failures, 'error', error_text,
                                              'prev_worker', t.worker or '', 'worker', '', 'not_before_ms', not_before})
  redis.call('ZADD', K.delayed, not_before, task_id)
  return 'FAILED', '', not_before
end

-- A lease that ended without a result (expired, or the worker came back without the task):
-- requeue with the previous worker remembered, or DEAD once the task was lost more than max_lost times.
-- A requeued task shows no error (the ended attempt keeps its own, and so do earlier ones).
local function lose_lease(task_id, t, now, max_lost, reason)
  drop_lease(task_id, t)
  local ended = {state = 'LOST', finished_ms = now, error = reason}
  local lost = tonumber(t.lost or '0') + 1
  if lost > max_lost then
    finish_attempt(task_id, t, ended, {'state', 'DEAD', 'lost', lost, 'worker', '', 'finished_ms', now,
                                       'error', 'lost ' .. lost .. ' times (last: ' .. reason .. ')'})
    return 'DEAD', task_terminal(t.run_id, 'dead', now)
  end
  finish_attempt(task_id, t, ended, {'state', 'READY', 'lost', lost, 'prev_worker', t.worker, 'worker', '',
                                     'error', ''})
  enqueue_ready(task_id, t)
  return 'READY', ''
end

-- Create run `run_id` of job `job_id` (scheduled at `scheduled_ms`) and its READY tasks, from `b`
-- (decoded JSON): {group, max_attempts, backoff_ms, backoff_mult, backoff_max_ms, timeout_ms, route,
-- routing ('' = default), cap, score, recurring, spec_v (the job's spec version; recorded unless 1),
-- rerun_of and after_run (the run this one runs again, the parent's run that fired it; recorded when set),
-- backfill (true: a backfill's run, recorded; absent otherwise),
-- hooks (letters F, S: the spec has its own --on-failure, --on-success URL; recorded when set),
-- tasks = [inputs JSON of task 0, of task 1, ...]} (task i's
-- id is task_id(run_id, i)). Settings shared by
-- the tasks live in the run hash, and only when they differ from the defaults (no retries, no timeout, no
-- cap); a task hash holds only what differs per task. With a max concurrency cap > 0, tasks from index
-- cap on wait in run:{run}:gate and enter the ready queue one per task of the run that ends. A task's
-- previous worker starts as the worker that last ran the same task index of the job (job field
-- w:{index}), so a recurring job keeps landing on a warm worker. `new_job`: the job is being created in
-- the same script (it has no previous workers, and its run count is written by the caller).
-- A run with no tasks (a split that produced none) has nothing to wait for: it is SUCCEEDED as it is
-- created and never joins the job's active set. Returns the run's state (SCHEDULED or SUCCEEDED).
local GROUPS_ADDED = {}  -- groups this script call has already added to K.groups
local create_pipeline_run  -- lib_pipelines.lua: a pipeline run makes its first steps' runs with create_run
local function create_run(job_key, job_id, run_id, scheduled_ms, now, b, new_job)
  local n = b.graph and #b.graph or #b.tasks  -- a pipeline run's "tasks" are its steps
  if not new_job then redis.call('HINCRBY', job_key, 'runs', 1) end
  local state = n > 0 and 'SCHEDULED' or 'SUCCEEDED'
  -- Counters (succeeded, dead, cancelled) start absent (= 0), and so do default settings.
  local fields = {'state', state, 'job_id', job_id, 'scheduled_ms', scheduled_ms, 'fired_ms', now,
                  'task_count', n}
  if n == 0 then push(fields, 'finished_ms', now) end
  if b.max_attempts > 1 then
    push(fields, 'max_attempts', b.max_attempts, 'backoff_ms', b.backoff_ms, 'backoff_mult', b.backoff_mult,
         'backoff_max_ms', b.backoff_max_ms)
  end
  if b.timeout_ms > 0 then push(fields, 'timeout_ms', b.timeout_ms) end
  if b.cap > 0 then push(fields, 'max_concurrent', b.cap) end
  if b.spec_v > 1 then push(fields, 'spec_v', b.spec_v) end
  if b.rerun_of ~= '' then push(fields, 'rerun_of', b.rerun_of) end
  if b.after_run ~= '' then push(fields, 'after_run', b.after_run) end
  if b.backfill then push(fields, 'backfill', 1) end
  if b.prun then push(fields, 'prun', b.prun, 'step', b.step) end
  if b.upstream then push(fields, 'upstream', b.upstream) end
  if b.hooks and b.hooks ~= '' then push(fields, 'hooks', b.hooks) end
  if b.graph then return create_pipeline_run(job_id, run_id, now, b, fields) end
  redis.call('HSET', K.run(run_id), unpack(fields))
  if n == 0 then
    record_webhook(run_id, state, b.hooks, now)
    return state
  end
  redis.call('SADD', K.job_active(job_id), run_id)
  local ready = K.ready(b.group)
  -- The block's score was made from the run's scheduled time; a run waits its turn by when it was queued,
  -- so a backfill or rerun of a past date queues behind current work of the same priority.
  local score = b.score - tonumber(scheduled_ms) + tonumber(now)
  for i = 0, n - 1 do
    local id, inputs = task_id(run_id, i), b.tasks[i + 1]
    local tkey = K.task(id)
    local t = {'state', 'READY', 'run_id', run_id, 'job_id', job_id, 'index', i, 'group', b.group, 'score', score}
    if inputs ~= '[]' then push(t, 'inputs', inputs) end
    if b.routing ~= '' then push(t, 'routing', b.routing, 'route', b.route) end
    if b.recurring and i < AFFINITY_MAX_INDEX then
      push(t, 'aff', 1)
      if not new_job then
        local prev = redis.call('HGET', job_key, 'w:' .. i)
        if prev then push(t, 'prev_worker', prev) end
      end
    end
    redis.call('HSET', tkey, unpack(t))
    if b.cap > 0 and i >= b.cap then
      redis.call('ZADD', K.run_gate(run_id), i, id)
    else
      redis.call('ZADD', ready, score, id)
    end
  end
  if not GROUPS_ADDED[b.group] then
    redis.call('SADD', K.groups, b.group)
    GROUPS_ADDED[b.group] = true
  end
  return state
end

-- A job leaves every listing and index at once (its hash, `jobs`, `schedule`, `awaiting`, its parent's
-- children) and joins `purge`, where retention.lua finds its runs, tasks and attempts and deletes them a
-- bounded batch at a time. Nothing can fire it afterwards: fire.lua finds no job. The caller has made sure it
-- has no active run. A parent unlinked by retention (it ended long ago: it will not run again) takes its
-- children index with it; its children stay, and never fire.
-- The name index P:name:{name} is a sorted set, each job scored by its creation ms (newest last, whatever
-- its id: the listing by name does not depend on how ids are made): a name usually has one job, and a
-- small sorted set takes Redis's compact encoding where a set of strings (before Redis 7.2) never does —
-- 240 bytes less per job. An earlier version scored every entry 0 (its ids sorted by creation):
-- those sort before every newer one, by id. A set an earlier version left is turned into a sorted set the
-- first time it is touched (master/redis_reads.py reads either).
local function name_index(name)
  local key = K.job_name(name)
  if redis.call('TYPE', key).ok == 'set' then
    local members = redis.call('SMEMBERS', key)
    redis.call('DEL', key)
    for _, id in ipairs(members) do redis.call('ZADD', key, 0, id) end
  end
  return key
end

local function name_add(name, job_id, created_ms) redis.call('ZADD', name_index(name), created_ms, job_id) end

local function name_remove(name, job_id) redis.call('ZREM', name_index(name), job_id) end

local function unlink_job(job_id, now)
  local parent = redis.call('HGET', K.job(job_id), 'after')
  if parent then
    redis.call('SREM', K.job_children(parent), job_id)
    if redis.call('SCARD', K.job_children(parent)) == 0 then redis.call('SREM', K.parents, parent) end
  end
  redis.call('SREM', K.parents, job_id)
  local name = redis.call('HGET', K.job(job_id), 'name')
  if name then name_remove(name, job_id) end
  -- A pipeline's step jobs (of every version) go with it; their runs are purged as its own are.
  for _, step_job in ipairs(redis.call('SMEMBERS', K.job_steps(job_id))) do
    local bundle = redis.call('HGET', K.job(step_job), 'bundle')
    if bundle then redis.call('SREM', K.bundle_jobs(bundle), step_job) end
    redis.call('DEL', K.job(step_job), K.job_active(step_job))
    redis.call('ZREM', K.jobs, step_job)
    redis.call('ZADD', K.purge, now, step_job)
  end
  redis.call('DEL', K.job(job_id), K.job_steps(job_id), K.job_active(job_id), K.job_backfill(job_id), K.job_children(job_id))
  redis.call('HDEL', K.backfills, job_id)
  redis.call('ZREM', K.jobs, job_id)
  redis.call('ZREM', K.jobs_paused, job_id)
  redis.call('ZREM', K.jobs_pipelines, job_id)
  redis.call('ZREM', K.schedule, job_id)
  redis.call('SREM', K.awaiting, job_id)
  redis.call('ZADD', K.purge, now, job_id)
end

-- ---- Child jobs (master/children.py) ---------------------------------------------------------------
--
-- Invariant: a child job fires for a run of its parent in the script that ended that run, at most once
-- (its run id is the child's id and the parent run's time), and only while the child is ACTIVE.
fire_children = function(parent, run_id, state, scheduled, now)
  for _, child in ipairs(redis.call('SMEMBERS', K.job_children(parent))) do
    local job_key = K.job(child)
    local v = redis.call('HMGET', job_key, 'state', 'cblock')
    local b = v[2] and cjson.decode(v[2])
    if v[1] == 'ACTIVE' and b and (b.when == state or b.when == 'ALWAYS' and state ~= 'SKIPPED') then
      local child_run = child .. '.' .. string.sub(run_id, -13)
      if redis.call('EXISTS', K.run(child_run)) == 0 then
        redis.call('ZADD', K.job_runs(child), scheduled, child_run)
        redis.call('HSET', job_key, 'last_run_id', child_run, 'updated_ms', now)
        local blocker = b.overlap == 'forbid' and redis.call('SRANDMEMBER', K.job_active(child))
        if blocker then
          redis.call('HSET', K.run(child_run), 'state', 'SKIPPED', 'job_id', child, 'scheduled_ms', scheduled,
                     'fired_ms', now, 'finished_ms', now, 'task_count', 0, 'after_run', run_id,
                     'reason', 'overlap forbidden: run ' .. blocker .. ' is still active')
          redis.call('HINCRBY', job_key, 'skipped', 1)
        else
          b.score = b.score + tonumber(scheduled)
          b.after_run = run_id
          if create_run(job_key, child, child_run, scheduled, now, b, false) == 'SUCCEEDED' then
            fire_children(child, child_run, 'SUCCEEDED', scheduled, now)  -- a split of no task ends at once
          end
        end
      end
    end
  end
end
