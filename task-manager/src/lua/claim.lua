-- Leases the next task to a worker: the tenant with the lowest pass in the fair share is
-- served (equal passes: the smaller id) and its pass advances by PASS_SCALE / weight; within
-- the tenant its next claim in the priority cycle picks the queue (fair.rs).
-- ARGV: prefix, worker_id, lease_token, lease_ttl_ms, claim cycle (e.g. 'hnhlhnh': the
--       preferred queue of each claim in one turn of a tenant's round robin), pass_scale.
-- Returns {task_id, spec_json, attempt} or nil.
local worker, token, lease_ttl, cycle = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local pass_scale = tonumber(ARGV[6])
local names = { h = 'high', n = 'normal', l = 'low' }

-- The tenant's queues in the order its next claim tries them.
local function order_of(tenant)
  local seq = tonumber(redis.call('HGET', CLAIM_SEQ, tenant)) or 0
  local slot = (seq % #cycle) + 1
  local preferred = names[string.sub(cycle, slot, slot)]
  local order = { preferred }
  for _, prio in ipairs({ 'high', 'normal', 'low' }) do
    if prio ~= preferred then order[#order + 1] = prio end
  end
  return order
end

-- The tenant's next queued task, dropping debris (ids whose record expired) on the way.
local function next_task(tenant)
  for _, prio in ipairs(order_of(tenant)) do
    while true do
      local id = redis.call('LPOP', queue_key(tenant, prio))
      if not id then break end
      if redis.call('HGET', task_key(id), 'status') == 'queued' then return id end
    end
  end
  return false
end

while true do
  local head = redis.call('ZRANGE', ACTIVE, 0, 0, 'WITHSCORES')
  if #head == 0 then break end
  local tenant = head[1]
  local id = next_task(tenant)
  if not id then
    -- Its queues ran empty (cancellations): it leaves until it queues again.
    redis.call('ZREM', ACTIVE, tenant)
  else
    redis.call('HINCRBY', CLAIM_SEQ, tenant, 1)
    if tenant_queue_len(tenant) == 0 then
      redis.call('ZREM', ACTIVE, tenant)
    else
      -- The built-in tenant has no weight stored: the default, 1.
      local weight = tonumber(redis.call('HGET', TENANT_WEIGHTS, tenant)) or 1
      -- ZINCRBY adds in Redis's doubles: a pass formatted by Lua (14 digits) would lose bits.
      redis.call('ZINCRBY', ACTIVE, math.floor(pass_scale / weight), tenant)
    end
    local key = task_key(id)
    local now = now_ms()
    local attempt = redis.call('HINCRBY', key, 'attempts', 1)
    redis.call('HSET', key, 'worker_id', worker, 'lease_token', token, 'started_at', now)
    redis.call('ZADD', LEASES, now + lease_ttl, id)
    transition(id, 'queued', 'running', now, 0)
    return { id, redis.call('HGET', key, 'spec'), attempt }
  end
end

-- Nothing is queued, so every wake token left is stale; a blocked claimer must not spin on them.
redis.call('DEL', WAKE)
return false
