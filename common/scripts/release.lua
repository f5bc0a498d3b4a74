-- release.lua — retry backoffs that have elapsed: FAILED tasks go back to their ready queue.
--
-- KEYS[1] delayed
-- ARGV[1] max tasks to release; ARGV[2..] specific task ids (none: every task whose backoff is over)
-- Returns the flat list of (task id, group) released.
--
-- Invariant: a task leaves `delayed` only once its retry time (Redis TIME) has passed, and only while it
-- is still FAILED (a cancel in between wins). A task READY again carries no error: the failed attempt's
-- error stays in its attempt record (att_error, archived at the next claim).
local now = now_ms()
local ids
if #ARGV > 1 then
  ids = {}
  for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
else
  ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
end
local out = {}
for _, task_id in ipairs(ids) do
  local due = redis.call('ZSCORE', KEYS[1], task_id)
  if due and tonumber(due) <= now then
    redis.call('ZREM', KEYS[1], task_id)
    local t = load_task(task_id)
    if t and may('task', t.state, 'READY') and t.state == 'FAILED' then
      redis.call('HSET', K.task(task_id), 'state', 'READY', 'not_before_ms', '', 'error', '')
      enqueue_ready(task_id, t)
      out[#out + 1] = task_id
      out[#out + 1] = t.group
    end
  end
end
return out
