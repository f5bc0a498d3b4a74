-- webhook.lua — the durable webhook deliveries (master/webhooks.py): what the leader delivers is recorded by
-- the script that ended the run (lib.lua record_webhook); this script is the leader's only write to it.
--
-- ARGV[1] op:
--   'defaults' ARGV[2] F, ARGV[3] S ('1' | '0'): the leader has a default URL for failed, succeeded runs —
--              runs that end from now on without a URL of their own get a delivery when it has one;
--   'retry'    ARGV[2] run id, ARGV[3] next due ms: a try failed; returns the failed tries so far, or 0
--              when the run has no delivery pending any more (nothing is written then);
--   'done'     ARGV[2] run id: delivered, or given up, or nothing to deliver; returns 1 if it was pending.
--
-- Invariant: a delivery leaves K.webhooks only by 'done', which only the current leader can call (fenced):
-- a deposed leader's success does not remove it, so the new leader delivers it again (at least once).
local op = ARGV[1]
if op == 'defaults' then
  for i, letter in ipairs({'F', 'S'}) do
    if ARGV[i + 1] == '1' then
      redis.call('HSET', K.webhook_defaults, letter, 1)
    else
      redis.call('HDEL', K.webhook_defaults, letter)
    end
  end
  return 1
elseif op == 'retry' then
  if not redis.call('ZSCORE', K.webhooks, ARGV[2]) then return 0 end
  redis.call('ZADD', K.webhooks, tonumber(ARGV[3]), ARGV[2])
  return redis.call('HINCRBY', K.webhook_tries, ARGV[2], 1)
elseif op == 'done' then
  redis.call('HDEL', K.webhook_tries, ARGV[2])
  return redis.call('ZREM', K.webhooks, ARGV[2])
end
return redis.error_reply('webhook.lua: unknown op ' .. tostring(op))
