-- Cancels queued tasks of deleted tenants, at most `limit` per call so that one call never
-- blocks Redis for long, and forgets a tenant's counters once its queues are empty.
-- ARGV: prefix, result_ttl_ms, limit. Returns {cancelled, examined}.
local ttl, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
local cancelled, examined = 0, 0
local purging = redis.call('HGETALL', PURGING)
local classes = queue_classes()
for i = 1, #purging, 2 do
  local id, reason = purging[i], purging[i + 1]
  for _, class in ipairs(classes) do
    for _, prio in ipairs(PRIORITIES) do
      while examined < limit do
        local task = redis.call('LPOP', queue_key(class, id, prio))
        if not task then break end
        examined = examined + 1
        if redis.call('HGET', task_key(task), 'status') == 'queued' then
          redis.call('HSET', task_key(task), 'error', reason)
          transition(task, 'queued', 'cancelled', now, ttl)
          cancelled = cancelled + 1
        end
      end
    end
  end
  if queue_len(id, classes) == 0 then
    redis.call('HDEL', PURGING, id)
    redis.call('HDEL', TENANT_QUEUED, id)
    redis.call('HDEL', TENANT_RUNNING, id)
    redis.call('HDEL', UNCLASSED, id)
    local claimers = redis.call('HGETALL', CLAIM_CLASSES)
    for j = 1, #claimers, 2 do redis.call('HDEL', CLAIM_SEQ, claim_seq_field(claimers[j], id)) end
  end
  if examined >= limit then break end
end
return { cancelled, examined }
