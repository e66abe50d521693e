-- ARGV: prefix, task_id, result_ttl_ms, reason (the task's error).
-- Returns {'cancelled', previous status}, {'finished', status} or {'not_found'}.
local id, ttl, reason = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local key = task_key(id)
local f = redis.call('HMGET', key, 'status', 'priority', 'tenant', 'class')
local status = f[1]
if not status then return { 'not_found' } end
if TERMINAL[status] then return { 'finished', status } end
if status == 'queued' then
  -- The tenant stays in the fair shares until a claim finds its queues empty.
  redis.call('LREM', queue_key(queue_class(f[4]), f[3], f[2]), 0, id)
else
  -- The lease token stays so that its holder learns of the cancellation at its next renewal.
  redis.call('ZREM', LEASES, id)
end
redis.call('HSET', key, 'error', reason)
transition(id, status, 'cancelled', now_ms(), ttl)
return { 'cancelled', status }
