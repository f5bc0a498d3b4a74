-- bundle_gc.lua — delete shipped bundles that no job needs any more.
--
-- KEYS[1] bundles (zset digest -> created or last looked-at ms: the oldest are looked at first)
-- ARGV[1] grace ms (a bundle uploaded this recently and never referenced, or that a client was told is
--         present this recently (held_ms, bundle_hold.lua), is kept: its job's submit may still be on its
--         way)   ARGV[2] at most this many digests looked at
-- Returns the digests deleted.
--
-- Invariant: a bundle is deleted only when every job that names it is CANCELLED with no active run (nothing
-- can fire or run it again: a COMPLETED job can still be triggered, rerun or backfilled, so it keeps its
-- bundle until it is deleted, by `sparkyard delete` or retention's --history-max-age) or deleted (its
-- reference is dropped here: retention.lua cannot read a job's bundle), or when none ever named it past the
-- grace; and never within the grace after a client was told it is present. The check and the delete are one
-- step, and submit.lua / update.lua write a job's reference in the step that stores the job, only
-- while the bundle exists: a job stored meanwhile cannot be missed, and none is stored without its bundle.
--
-- The references are read a page at a time (SSCAN) up to the first job that needs the bundle: a bundle a
-- million jobs share was read whole (SMEMBERS) at every look, which held Redis for ~0.8 s each minute.
local now = now_ms()
local grace = tonumber(ARGV[1])
local deleted = {}

-- Whether a job of reference set ``refs`` can still fire or run; drops deleted jobs' references on the way.
local function needed_by(refs)
  local cursor = '0'
  repeat
    local page = redis.call('SSCAN', refs, cursor, 'COUNT', 100)
    cursor = page[1]
    for _, job_id in ipairs(page[2]) do
      local state = redis.call('HGET', K.job(job_id), 'state')
      if not state then
        redis.call('SREM', refs, job_id)  -- a deleted job's reference
      elseif state ~= 'CANCELLED' or redis.call('SCARD', K.job_active(job_id)) > 0 then
        return true
      end
    end
  until cursor == '0'
  return false
end

for _, digest in ipairs(redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)) do
  local refs = K.bundle_jobs(digest)
  local stamps = redis.call('HMGET', K.bundle(digest), 'held_ms', 'created_ms')
  local needed
  if now - tonumber(stamps[1] or '0') < grace then
    needed = true
  elseif redis.call('SCARD', refs) == 0 then
    needed = now - tonumber(stamps[2] or '0') < grace
  else
    needed = needed_by(refs)
  end
  if needed then
    redis.call('ZADD', KEYS[1], 'XX', now, digest)  -- looked at: to the back of the list
  else
    redis.call('DEL', K.bundle(digest), refs)
    redis.call('ZREM', KEYS[1], digest)
    deleted[#deleted + 1] = digest
  end
end
return deleted
