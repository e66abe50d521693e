-- Leases the next task to a worker.
-- ARGV: prefix, worker_id, lease_token, lease_ttl_ms, claim cycle (e.g. 'hnhlhnh': the
--       preferred queue of each claim in one turn of the weighted round robin).
-- Returns {task_id, spec_json, attempt} or nil.
local worker, token, lease_ttl, cycle = ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
local names = { h = 'high', n = 'normal', l = 'low' }

local seq = tonumber(redis.call('HGET', STATS, 'claim_seq') or '0')
local slot = (seq % #cycle) + 1
local preferred = names[string.sub(cycle, slot, slot)]
local order = { preferred }
for _, prio in ipairs({ 'high', 'normal', 'low' }) do
  if prio ~= preferred then order[#order + 1] = prio end
end

for _, prio in ipairs(order) do
  while true do
    local id = redis.call('LPOP', queue_key(prio))
    if not id then break end
    local key = task_key(id)
    -- Anything but a queued task here is debris (e.g. its record expired); drop it.
    if redis.call('HGET', key, 'status') == 'queued' then
      local now = now_ms()
      local attempt = redis.call('HINCRBY', key, 'attempts', 1)
      redis.call('HSET', key, 'worker_id', worker, 'lease_token', token, 'started_at', now)
      redis.call('ZADD', LEASES, now + lease_ttl, id)
      transition(id, 'queued', 'running', now, 0)
      redis.call('HINCRBY', STATS, 'claim_seq', 1)
      return { id, redis.call('HGET', key, 'spec'), attempt }
    end
  end
end

-- Nothing is queued, so every wake token left is stale; a blocked claimer must not spin on them.
redis.call('DEL', WAKE)
return false
