-- leader.lua — leader election: one master leads, holding a lease; every change of leader bumps the epoch.
--
-- KEYS (none: K.leader, K.epoch)
-- ARGV[1] op: acquire | takeover | renew | resign   ARGV[2] master id   ARGV[3] address   ARGV[4] lease ms
--       ARGV[5] the caller's epoch (renew, resign); takeover: ARGV[6] the holder's id, ARGV[7] its epoch
-- Returns {status, epoch, leader id, leader address}: status 'leader' (the caller leads under that epoch)
-- or 'standby' (someone else leads, or nobody: epoch 0 then).
--
-- acquire: take the lease if nobody holds it — or if the caller holds it already (a restarted master
--          with the same id reclaims it at once) — under a new epoch.
-- takeover: take the lease from the holder the caller names (id and epoch) while its lease runs: the caller
--          saw that holder's process gone (no connection of it to Redis for half a lease; master/leader.py).
--          Refused if the lease changed hands since, so it never takes a lease from a leader it did not see.
-- renew:   extend the lease only if the caller holds it under the same epoch.
-- resign:  give the lease up (graceful stop) so a standby takes over at its next try.
--
-- Invariant: the epoch only grows and names exactly one holder; the write scripts compare it with their
-- caller's (fence.lua), so a leader that lost the lease cannot change anything any more.
local op, id, address, lease_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local holder = redis.call('HMGET', K.leader, 'id', 'epoch', 'address')
local function reply(status)
  local now = redis.call('HMGET', K.leader, 'id', 'epoch', 'address')
  return {status, now[2] or '0', now[1] or '', now[3] or ''}
end
local function lead()
  local epoch = redis.call('INCR', K.epoch)
  redis.call('DEL', K.leader)
  redis.call('HSET', K.leader, 'id', id, 'epoch', epoch, 'address', address)
  redis.call('PEXPIRE', K.leader, lease_ms)
  return reply('leader')
end
if op == 'acquire' then
  if holder[1] and holder[1] ~= id then return reply('standby') end
  return lead()
end
if op == 'takeover' then
  if holder[1] ~= ARGV[6] or holder[2] ~= ARGV[7] then return reply('standby') end
  return lead()
end
local ours = holder[1] == id and holder[2] == ARGV[5]
if op == 'renew' then
  if not ours then return reply('standby') end
  redis.call('PEXPIRE', K.leader, lease_ms)
  return reply('leader')
end
if op == 'resign' then
  if ours then redis.call('DEL', K.leader) end
  return reply('standby')
end
return redis.error_reply('leader.lua: unknown op ' .. tostring(op))
