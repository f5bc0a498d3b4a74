-- cancel.lua — cancel a job (no more firings), runs and tasks.
--
-- KEYS[1] schedule
-- ARGV[1] reason   ARGV[2] job id to cancel ('' to leave the job alone)
-- ARGV[3] number of run ids m, then m run ids (every active run of the job when cancelling a job),
-- then the task ids to cancel (the tasks of those runs, or a single task). A pipeline run listed has its
-- steps not yet started cancelled, and the tasks of its running steps (found here) with the others.
-- Returns {status, cancelled ids, leased, ended runs}:
--   status 'ok', or 'retry' when the job has an active run the caller did not list (a firing raced the
--   cancel: nothing was changed, read again and call again);
--   cancelled: ids (job, runs, tasks) whose state changed; leased: flat (task id, worker, token) of
--   tasks that were running, whose workers must be told to kill them; ended runs: flat (run id, state,
--   and the pipeline run that run's end ended, its state and duration in ms: '', '', 0 if none).
--
-- Invariant: a cancelled task leaves every queue and index in the same step (ready, delayed, leases),
-- so nothing can dispatch, retry or requeue it afterwards; terminal tasks and runs are left as they are.
local now = now_ms()
local reason = ARGV[1]
local job_id = ARGV[2]
local m = tonumber(ARGV[3])
local listed = {}
for i = 4, 3 + m do listed[ARGV[i]] = true end
local cancelled, leased, ended = {}, {}, {}

if job_id ~= '' then
  for _, run_id in ipairs(redis.call('SMEMBERS', K.job_active(job_id))) do
    if not listed[run_id] then return {'retry', {}, {}, {}} end
  end
  local state = redis.call('HGET', K.job(job_id), 'state')
  if state and may('job', state, 'CANCELLED') then
    redis.call('HSET', K.job(job_id), 'state', 'CANCELLED', 'updated_ms', now, 'next_fire_ms', '')
    redis.call('ZREM', KEYS[1], job_id)
    if state == 'PAUSED' then redis.call('ZREM', K.jobs_paused, job_id) end
    redis.call('SREM', K.awaiting, job_id)  -- a fixed-delay job waiting for its run's end waits no more
    redis.call('HDEL', K.job(job_id), 'awaits')
    cancelled[#cancelled + 1] = job_id
  end
end
local tasks = {}
for i = 4 + m, #ARGV do tasks[#tasks + 1] = ARGV[i] end
for i = 4, 3 + m do
  local rkey = K.run(ARGV[i])
  local v = redis.call('HMGET', rkey, 'state', 'graph')
  if v[1] and may('run', v[1], 'CANCELLED') then
    redis.call('HSET', rkey, 'reason', reason)
    -- A pipeline run: its steps not started never will, its running steps' tasks are cancelled below.
    if v[2] then
      for _, id in ipairs(cancel_pipeline_steps(ARGV[i])) do tasks[#tasks + 1] = id end
    end
  end
end
for _, task_id in ipairs(tasks) do
  local t = load_task(task_id)
  local leased_now = t and t.state == 'LEASED'  -- its attempt runs: it ends CANCELLED with the task
  if t and (leased_now and may_end_attempt(t, 'CANCELLED', {'CANCELLED'}) or
            not leased_now and may('task', t.state, 'CANCELLED')) then
    local final = {'state', 'CANCELLED', 'worker', '', 'error', reason, 'finished_ms', now}
    if leased_now then
      drop_lease(task_id, t)
      finish_attempt(task_id, t, {state = 'CANCELLED', finished_ms = now, error = reason}, final)
      push(leased, task_id, t.worker, t.token)
    else
      if t.state == 'READY' then
        redis.call('ZREM', K.ready(t.group), task_id)
        redis.call('ZREM', K.run_gate(t.run_id), task_id)
      else
        redis.call('ZREM', K.delayed, task_id)
      end
      redis.call('HSET', K.task(task_id), unpack(final))
    end
    cancelled[#cancelled + 1] = task_id
    local run_state = task_terminal(t.run_id, 'cancelled', now)
    if run_state ~= '' then
      push(ended, t.run_id, run_state, pipeline_end(t.run_id, run_state))
      cancelled[#cancelled + 1] = t.run_id
    end
  end
end
return {'ok', cancelled, leased, ended}
