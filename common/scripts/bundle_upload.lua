-- bundle_upload.lua — write a shipped bundle: its chunks under a temporary key, then publish it whole.
--
-- KEYS[1] the upload's temporary key (P:bundle:{digest}:up:{upload})   KEYS[2] bundle:{digest}
-- KEYS[3] bundles (the collector's list)
-- ARGV[1] op: chunk | publish | drop
--   chunk:   ARGV[2] chunk index   ARGV[3] its bytes   ARGV[4] ms the unfinished upload is kept (its client
--            may have died)
--   publish: ARGV[2] size   ARGV[3] chunk count   ARGV[4] digest (the master checked size and sha256)
--   drop:    (a failed upload: its chunks go at once rather than when they expire)
-- Returns 'ok', or 'expired' (publish: the temporary key is gone, nothing was written).
--
-- Invariant: a bundle key appears only whole (one RENAME of a checked upload), with created_ms for the
-- collector's grace and its entry in the collector's list, so a reader never sees half a bundle and the
-- collector never misses one. Like every write, it is fenced: a deposed leader stores nothing.
local op, temp = ARGV[1], KEYS[1]
if op == 'chunk' then
  redis.call('HSET', temp, 'c' .. ARGV[2], ARGV[3])
  redis.call('PEXPIRE', temp, ARGV[4])
  return 'ok'
end
if op == 'publish' then
  if redis.call('EXISTS', temp) == 0 then return 'expired' end
  local now = now_ms()
  redis.call('HSET', temp, 'size', ARGV[2], 'chunks', ARGV[3], 'created_ms', now)
  redis.call('PERSIST', temp)
  redis.call('RENAME', temp, KEYS[2])
  redis.call('ZADD', KEYS[3], now, ARGV[4])
  return 'ok'
end
if op == 'drop' then
  redis.call('DEL', temp)
  return 'ok'
end
return redis.error_reply('bundle_upload.lua: unknown op ' .. tostring(op))
