-- Leases the next task to a worker of device class `class`: a task of that class or of no
-- class. The class's fair share serves the tenant with the lowest pass (equal passes: the
-- smaller id) and advances its pass by PASS_SCALE / weight; within the tenant its next claim in
-- the priority cycle picks the priority, and within a priority the task queued first (of the
-- class's queue and the unclassed one) is served (fair.rs).
-- ARGV: prefix, worker_id, lease_token, lease_ttl_ms, claim cycle (e.g. 'hnhlhnh': the
--       preferred queue of each claim in one turn of a tenant's round robin), pass_scale,
--       class (a device class, never ANY).
-- Returns {task_id, spec_json, attempt, ms queued (submission to this claim)} or nil.
local worker, token, lease_ttl, cycle = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local pass_scale, class = tonumber(ARGV[6]), ARGV[7]
local active = active_key(class)
local mine = { class, ANY }

-- Known from now on as a class that claims: tasks of no class wake it, deletions reach it.
redis.call('HSET', CLAIM_CLASSES, class, now_ms())
-- Tenants with tasks of no class join this class's share (passes move only at claims, so this
-- is as if they had joined when they queued them).
local unclassed = redis.call('HGETALL', UNCLASSED)
for i = 1, #unclassed, 2 do activate(class, unclassed[i]) end

-- The tenant's priorities in the order its next claim tries them.
local function order_of(tenant)
  local seq = tonumber(redis.call('HGET', CLAIM_SEQ, claim_seq_field(class, tenant))) or 0
  local slot = (seq % #cycle) + 1
  local preferred = PRIORITY_BY_INITIAL[string.sub(cycle, slot, slot)]
  local order = { preferred }
  for _, prio in ipairs(PRIORITIES) do
    if prio ~= preferred then order[#order + 1] = prio end
  end
  return order
end

-- The first queued task in list `q`, or false; debris (ids no longer queued) is dropped.
local function head_of(q)
  while true do
    local id = redis.call('LINDEX', q, 0)
    if not id then return false end
    if redis.call('HGET', task_key(id), 'status') == 'queued' then return id end
    redis.call('LPOP', q)
  end
end

-- The tenant's next task for this class, taken out of its queue.
local function next_task(tenant)
  for _, prio in ipairs(order_of(tenant)) do
    local own, any = queue_key(class, tenant, prio), queue_key(ANY, tenant, prio)
    local a, b = head_of(own), head_of(any)
    if a and b then
      -- The one queued first, as if the two queues were one.
      local qa = tonumber(redis.call('HGET', task_key(a), 'qseq')) or 0
      local qb = tonumber(redis.call('HGET', task_key(b), 'qseq')) or 0
      if qb < qa then a = false else b = false end
    end
    if a then
      redis.call('LPOP', own)
      return a
    end
    if b then
      redis.call('LPOP', any)
      return b
    end
  end
  return false
end

while true do
  local head = redis.call('ZRANGE', active, 0, 0, 'WITHSCORES')
  if #head == 0 then break end
  local tenant = head[1]
  local id = next_task(tenant)
  if not id then
    -- Its queues ran empty for this class (cancellations, other classes' claims): it leaves
    -- until it has work for the class again.
    redis.call('ZREM', active, tenant)
  else
    redis.call('HINCRBY', CLAIM_SEQ, claim_seq_field(class, tenant), 1)
    if queue_len(tenant, mine) == 0 then
      redis.call('ZREM', active, tenant)
    else
      -- The built-in tenant has no weight stored: the default, 1.
      local weight = tonumber(redis.call('HGET', TENANT_WEIGHTS, tenant)) or 1
      -- ZINCRBY adds in Redis's doubles: a pass formatted by Lua (14 digits) would lose bits.
      redis.call('ZINCRBY', active, math.floor(pass_scale / weight), tenant)
    end
    local key = task_key(id)
    local now = now_ms()
    local attempt = redis.call('HINCRBY', key, 'attempts', 1)
    redis.call('HSET', key, 'worker_id', worker, 'lease_token', token, 'started_at', now)
    redis.call('ZADD', LEASES, now + lease_ttl, id)
    transition(id, 'queued', 'running', now, 0)
    local submitted = tonumber(redis.call('HGET', key, 'submitted_at')) or now
    return { id, redis.call('HGET', key, 'spec'), attempt, math.max(0, now - submitted) }
  end
end

-- Nothing is queued for this class, so every wake token left on its list is stale; a blocked
-- claimer must not spin on them.
redis.call('DEL', wake_key(class))
return false
