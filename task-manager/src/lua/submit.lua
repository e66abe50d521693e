-- Queues one or more tasks, all or none with respect to the queue cap.
-- ARGV: prefix, queue_cap, batch_id ('' for none), result_ttl_ms, n,
--       then n times: task_id, priority, idempotency_key ('' for none), spec_json.
-- Returns {'full', queued} or {'ok', id_1, status_1, dedup_1, ...}.
local cap = tonumber(ARGV[2])
local batch = ARGV[3]
local ttl = tonumber(ARGV[4])
local n = tonumber(ARGV[5])
local now = now_ms()

local function arg(i, field) return ARGV[5 + (i - 1) * 4 + field] end

-- First pass reads only, so that a refused submission leaves no trace.
local ids, dedup, fresh = {}, {}, 0
local seen = {}
for i = 1, n do
  local idem = arg(i, 3)
  local existing = false
  if idem ~= '' then
    existing = seen[idem] or false
    if not existing then
      local prev = redis.call('GET', idem_key(idem))
      if prev and redis.call('EXISTS', task_key(prev)) == 1 then existing = prev end
    end
  end
  if existing then
    ids[i], dedup[i] = existing, 1
  else
    ids[i], dedup[i] = arg(i, 1), 0
    fresh = fresh + 1
    if idem ~= '' then seen[idem] = ids[i] end
  end
end

local queued = queued_total()
if fresh > 0 and queued + fresh > cap then return { 'full', queued } end

local bk = false
if batch ~= '' then
  bk = batch_key(batch)
  redis.call('HSET', bk, 'total', n, 'queued', 0, 'running', 0, 'done', 0, 'failed', 0,
    'cancelled', 0, 'created_at', now)
end

local out = { 'ok' }
for i = 1, n do
  local id = ids[i]
  local status = 'queued'
  if dedup[i] == 0 then
    local prio, idem = arg(i, 2), arg(i, 3)
    local key = task_key(id)
    redis.call('HSET', key, 'status', 'queued', 'spec', arg(i, 4), 'attempts', 0,
      'priority', prio, 'submitted_at', now)
    if idem ~= '' then
      redis.call('HSET', key, 'idem', idem)
      redis.call('SET', idem_key(idem), id)
    end
    if bk then
      redis.call('HSET', key, 'batch_id', batch, 'batches', batch)
      redis.call('HINCRBY', bk, 'queued', 1)
    end
    redis.call('RPUSH', queue_key(prio), id)
  else
    local key = task_key(id)
    status = redis.call('HGET', key, 'status')
    if bk then
      -- The reused task is counted in this batch too; an open one moves its counters from now on.
      redis.call('HINCRBY', bk, status, 1)
      if not TERMINAL[status] then
        local m = redis.call('HGET', key, 'batches')
        redis.call('HSET', key, 'batches', m and (m .. ' ' .. batch) or batch)
      end
    end
  end
  if bk then redis.call('RPUSH', batch_tasks_key(batch), id) end
  out[#out + 1] = id
  out[#out + 1] = status
  out[#out + 1] = dedup[i]
end

if bk then expire_batch_if_finished(batch, ttl) end
if fresh > 0 then
  redis.call('HINCRBY', STATS, 'submitted', fresh)
  wake(fresh)
end
return out
