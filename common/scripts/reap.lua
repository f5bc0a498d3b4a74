-- reap.lua — end leases that can no longer produce a result, and attempts past their deadline.
--
-- KEYS[1] leases   KEYS[2] timeouts
-- ARGV[1] max times a task may be lost before it is DEAD (poison task)
-- ARGV[2] ('expired' mode) max entries one call looks at, expired leases and timeouts together (leases
--         first); an entry of a task no longer LEASED counts too (it is only removed), so a call that
--         returns fewer tasks than this may still leave due entries for the next
-- ARGV[3] mode: 'expired' — leases whose deadline (Redis TIME) has passed, and attempts whose
--                           master-side timeout has passed (failed as TIMED_OUT);
--               'worker'  — ARGV[4] is a worker id that reconnected without the tasks in ARGV[5..]:
--                           those leases end now (the worker restarted and lost them).
-- Returns a flat list of groups of 11: task id, what ('lost' | 'timeout'), new task state, run id,
-- run state ('' unless the run just ended), worker that held it, retry time in ms (0 if none), the
-- ended attempt's fencing token, and the pipeline run that run's end ended, its state and its duration in
-- ms ('', '', 0 if none: lib_pipelines.lua pipeline_end).
--
-- Invariant: idempotent — each lease ends once (the task leaves LEASED here), so two masters running
-- the reaper at once cannot requeue a task twice; the next claim gives it a new, higher token.
local LOST_TARGETS, FAILED_TARGETS = {'READY', 'DEAD'}, {'FAILED', 'DEAD'}  -- where each end may take the task
local now = now_ms()
local max_lost = tonumber(ARGV[1])
local budget = tonumber(ARGV[2])  -- entries this call may still look at
local out = {}
local function emit(task_id, what, state, run_id, run_state, worker, not_before, token)
  push(out, task_id, what, state, run_id, run_state, worker, not_before, token, pipeline_end(run_id, run_state))
end
if ARGV[3] == 'worker' then
  for i = 5, #ARGV do
    local t = load_task(ARGV[i])
    if t and t.worker == ARGV[4] and may_end_attempt(t, 'LOST', LOST_TARGETS) then
      local state, run_state = lose_lease(ARGV[i], t, now, max_lost, 'worker ' .. ARGV[4] .. ' restarted')
      emit(ARGV[i], 'lost', state, t.run_id, run_state, t.worker, 0, t.token)
    end
  end
  return out
end
local expired = budget > 0 and redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, budget) or {}
budget = budget - #expired
for _, task_id in ipairs(expired) do
  local t = load_task(task_id)
  if t and may_end_attempt(t, 'LOST', LOST_TARGETS) then
    local state, run_state = lose_lease(task_id, t, now, max_lost, 'lease expired on worker ' .. t.worker)
    emit(task_id, 'lost', state, t.run_id, run_state, t.worker, 0, t.token)
  else
    redis.call('ZREM', KEYS[1], task_id)
  end
end
local overdue = budget > 0 and redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, budget) or {}
for _, task_id in ipairs(overdue) do
  local t = load_task(task_id)
  if t and may_end_attempt(t, 'TIMED_OUT', FAILED_TARGETS) then
    local worker = t.worker
    drop_lease(task_id, t)
    local msg = 'timed out: no result from worker ' .. worker .. ' within the task timeout'
    local state, run_state, not_before = fail_attempt(task_id, t, now, msg,
                                                      {state = 'TIMED_OUT', finished_ms = now, error = msg})
    emit(task_id, 'timeout', state, t.run_id, run_state, worker, not_before, t.token)
  else
    redis.call('ZREM', KEYS[2], task_id)
  end
end
return out
