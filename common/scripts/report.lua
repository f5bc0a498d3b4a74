-- report.lua — apply a batch of worker reports: attempts started and attempts finished.
--
-- KEYS[1] leases   KEYS[2] delayed   KEYS[3] timeouts
-- ARGV[1] JSON list of reports, each [task id, fencing token, outcome, result JSON, error, traceback,
--       started ms, finished ms, log path]; outcome: STARTED | SUCCEEDED | FAILED | TIMED_OUT | CANCELLED
--       | RELEASED. The token is a JSON string of its decimal digits: it is compared, as a string, with the
--       task's (HGET); cjson would decode a number to a double, which tostring prints with 14 significant
--       digits ('1e+14'), so tokens from 1e14 on would never match (or match the wrong attempt).
-- Returns per report a flat group of 9: task id, verdict, task state, run id, run state ('' unless the
-- run just ended), not-before ms (retry time, 0 if none), and the pipeline run that run's end ended, its
-- state and its duration in ms ('', '', 0 if none: lib_pipelines.lua pipeline_end).
-- verdict: accepted | stale (token is not the task's current one) | terminal (the attempt has ended: the
-- transition tables allow neither its end nor the task's move) | unknown
--
-- Invariant (the fencing rule): a report changes a task only if it carries the task's current token
-- and the task is LEASED; a late result of an older attempt can never overwrite a newer one, and a
-- terminal task never changes again. Failures retry after the backoff (task FAILED, in delayed) while
-- attempts remain, else the task is DEAD. CANCELLED/RELEASED from the worker itself hand the task back
-- to the ready queue without using up an attempt. A task back in the ready queue carries no error (its
-- attempts keep theirs).
--
-- An attempt's finished time is the worker's (when it really ended: the master frees its slot on
-- receipt, so the next task may be leased before this report is written), kept within [its start,
-- now] so a worker's clock running ahead or behind cannot record an impossible order. Retry backoffs
-- and run ends use Redis' clock.
-- Per outcome: the attempt state it ends the attempt in, and the task states that can follow (lib.lua
-- may_end_attempt checks both tables). STARTED ends nothing: it is taken only for an attempt that could
-- still end, which is what the check of a SUCCEEDED end says.
local ENDS = {STARTED = {'SUCCEEDED', {'SUCCEEDED'}}, SUCCEEDED = {'SUCCEEDED', {'SUCCEEDED'}},
              FAILED = {'FAILED', {'FAILED', 'DEAD'}}, TIMED_OUT = {'TIMED_OUT', {'FAILED', 'DEAD'}},
              CANCELLED = {'CANCELLED', {'READY'}}, RELEASED = {'RELEASED', {'READY'}}}
local now = now_ms()
local out = {}
local function emit(task_id, verdict, state, run_id, run_state, not_before)
  push(out, task_id, verdict, state, run_id, run_state, not_before, pipeline_end(run_id, run_state))
end
for _, rep in ipairs(cjson.decode(ARGV[1])) do
  local task_id, token, outcome = rep[1], rep[2], rep[3]
  if type(token) == 'number' then token = string.format('%.0f', token) end  -- exact below 2^53
  local t = load_task(task_id)
  if not t then
    emit(task_id, 'unknown', '', '', '', 0)
  elseif t.token ~= token then
    emit(task_id, 'stale', t.state, t.run_id, '', 0)
  elseif not ENDS[outcome] or not may_end_attempt(t, ENDS[outcome][1], ENDS[outcome][2]) then
    emit(task_id, 'terminal', t.state, t.run_id, '', 0)
  elseif outcome == 'STARTED' then
    redis.call('HSET', K.task(task_id), 'att_started_ms', rep[7], 'att_log', rep[9])
    emit(task_id, 'accepted', t.state, t.run_id, '', 0)
  else
    drop_lease(task_id, t)
    local finished = math.min(rep[8] > 0 and rep[8] or now, now)
    if rep[7] > 0 then finished = math.max(finished, rep[7]) end
    local ended = {state = outcome, finished_ms = finished, log_path = rep[9], error = rep[5], traceback = rep[6]}
    if rep[7] > 0 then ended.started_ms = rep[7] end
    if outcome == 'SUCCEEDED' then
      finish_attempt(task_id, t, ended, {'state', 'SUCCEEDED', 'result', rep[4], 'error', '', 'finished_ms', finished})
      if t.aff then redis.call('HSET', K.job(t.job_id), 'w:' .. t.index, t.worker) end
      -- ctx.skip() (worker/context.py SKIP_KEY): counted, so a pipeline step all of whose tasks skipped is SKIPPED.
      if string.sub(rep[4], 1, 9) == '{"$skip":' then redis.call('HINCRBY', K.run(t.run_id), 'skipped_tasks', 1) end
      emit(task_id, 'accepted', 'SUCCEEDED', t.run_id, task_terminal(t.run_id, 'succeeded', now), 0)
    elseif outcome == 'FAILED' or outcome == 'TIMED_OUT' then
      local state, run_state, not_before = fail_attempt(task_id, t, now, rep[5], ended)
      emit(task_id, 'accepted', state, t.run_id, run_state, not_before)
    else
      finish_attempt(task_id, t, ended, {'state', 'READY', 'prev_worker', t.worker, 'worker', '', 'error', ''})
      enqueue_ready(task_id, t)
      emit(task_id, 'accepted', 'READY', t.run_id, '', 0)
    end
  end
end
return out
