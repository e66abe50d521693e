-- Submits one or more tasks of one tenant, all or none with respect to the queue cap and the
-- tenant's max_queued, each as if submitted alone and in order: an idempotency key of the
-- tenant already known returns its task; else, unless force_refresh, a cached result in the
-- tenant's cache namespace makes a new task that is done at once, and an identical open task
-- of the tenant is joined (coalesced); else a new task is queued and becomes the in-flight task
-- of its cache key for the tenant.
-- ARGV: prefix, queue_cap, batch_id ('' for none), result_ttl_ms, tenant_id, builtin ('1' for
--       the built-in tenant, which has no record), n, queue_cap_bytes,
--       then n times: task_id, priority, idempotency_key ('' for none), spec_json, cache_key,
--       force_refresh ('1' or '0'), device class ('' for none).
-- Returns {'no_tenant'}, {'quota', queued, max_queued}, {'full', queued},
-- {'full_bytes', open_bytes} or
-- {'ok', id_1, status_1, how_1, ...}, `how` being 'new', 'dedup', 'coalesced' or 'cached'.
local cap = tonumber(ARGV[2])
local batch = ARGV[3]
local ttl = tonumber(ARGV[4])
local tenant = ARGV[5]
local n = tonumber(ARGV[7])
local cap_bytes = tonumber(ARGV[8])
local now = now_ms()
local PER_TASK = 7

local function arg(i, field) return ARGV[8 + (i - 1) * PER_TASK + field] end

-- The tenant must still exist (a deleted tenant's last requests are refused here, atomically
-- with its deletion); its record says its quota and cache namespace.
local max_queued, cns = false, tenant
if ARGV[6] ~= '1' then
  local t = redis.call('HMGET', tenant_key(tenant), 'name', 'max_queued', 'cache_ns')
  if not t[1] then return { 'no_tenant' } end
  max_queued = tonumber(t[2]) or false
  cns = t[3] or tenant
end

-- First pass reads only, so that a refused submission leaves no trace.
local ids, how, hits = {}, {}, {}
local seen, queued_here = {}, {}
local fresh, cached, misses, coalesced = 0, 0, 0, 0
-- Spec bytes of the tasks this call queues: counted in OPEN_BYTES until they finish.
local fresh_bytes = 0
for i = 1, n do
  local idem, ckey, force = arg(i, 3), arg(i, 5), arg(i, 6) == '1'
  local existing = false
  if idem ~= '' then
    existing = seen[idem] or false
    if not existing then
      local prev = redis.call('GET', idem_key(tenant, idem))
      if prev and redis.call('EXISTS', task_key(prev)) == 1 then existing = prev end
    end
  end
  if existing then
    ids[i], how[i] = existing, 'dedup'
  else
    ids[i], how[i] = arg(i, 1), 'new'
    if not force then
      local hit = redis.call('GET', rcache_key(cns, ckey))
      if hit then
        how[i], hits[i] = 'cached', hit
        cached = cached + 1
      else
        local open = queued_here[ckey]
        if not open then
          local prev = redis.call('GET', inflight_key(tenant, ckey))
          if prev then
            local st = redis.call('HGET', task_key(prev), 'status')
            if st == 'queued' or st == 'running' then open = prev end
          end
        end
        if open then
          ids[i], how[i] = open, 'coalesced'
          coalesced = coalesced + 1
        else
          misses = misses + 1
        end
      end
    end
    if how[i] == 'new' then
      fresh = fresh + 1
      fresh_bytes = fresh_bytes + #arg(i, 4)
      queued_here[ckey] = ids[i]
    end
    if idem ~= '' then seen[idem] = ids[i] end
  end
end

if fresh > 0 then
  if max_queued then
    local mine = tonumber(redis.call('HGET', TENANT_QUEUED, tenant)) or 0
    if mine + fresh > max_queued then return { 'quota', mine, max_queued } end
  end
  local queued = queued_total()
  if queued + fresh > cap then return { 'full', queued } end
  local open_bytes = tonumber(redis.call('HGET', STATS, OPEN_BYTES)) or 0
  if open_bytes + fresh_bytes > cap_bytes then return { 'full_bytes', open_bytes } end
end

local bk = false
if batch ~= '' then
  bk = batch_key(batch)
  redis.call('HSET', bk, 'total', n, 'queued', 0, 'running', 0, 'done', 0, 'failed', 0,
    'cancelled', 0, 'created_at', now, 'tenant', tenant)
end

local out = { 'ok' }
local logged, distinct = {}, 0
-- Queue class -> tasks queued in it by this call: the wake tokens to push.
local woken = {}
for i = 1, n do
  local id = ids[i]
  local key = task_key(id)
  local prio, idem, ckey, class = arg(i, 2), arg(i, 3), arg(i, 5), arg(i, 7)
  local status
  if how[i] == 'new' then
    status = 'queued'
    -- qseq: its place in the order tasks were queued, which a claim compares across the
    -- queues of a class and of no class.
    redis.call('HSET', key, 'status', 'queued', 'spec', arg(i, 4), 'attempts', 0,
      'priority', prio, 'submitted_at', now, 'ckey', ckey, 'tenant', tenant, 'cns', cns,
      'qseq', redis.call('HINCRBY', STATS, QUEUE_SEQ, 1), 'bytes', #arg(i, 4))
    if class ~= '' then redis.call('HSET', key, 'class', class) end
    if idem ~= '' then
      redis.call('HSET', key, 'idem', idem)
      redis.call('SET', idem_key(tenant, idem), id)
    end
    if bk then
      redis.call('HSET', key, 'batch_id', batch, 'batches', batch)
      redis.call('HINCRBY', bk, 'queued', 1)
    end
    enqueue(id, tenant, prio, queue_class(class), false)
    count_open(tenant, prio, queue_class(class), 'queued', 1)
    woken[queue_class(class)] = (woken[queue_class(class)] or 0) + 1
    -- Under force_refresh too: later identical requests join this evaluation. Deleted when the
    -- task finishes; the TTL only bounds an entry whose task record vanished.
    redis.call('SET', inflight_key(tenant, ckey), id, 'PX', ttl)
  elseif how[i] == 'cached' then
    status = 'done'
    redis.call('HSET', key, 'status', 'done', 'spec', arg(i, 4), 'attempts', 0,
      'priority', prio, 'submitted_at', now, 'started_at', now, 'finished_at', now,
      'result', hits[i], 'cached', 1, 'ckey', ckey, 'tenant', tenant, 'cns', cns)
    if class ~= '' then redis.call('HSET', key, 'class', class) end
    if idem ~= '' then
      redis.call('HSET', key, 'idem', idem)
      redis.call('SET', idem_key(tenant, idem), id, 'PX', ttl)
    end
    if bk then
      redis.call('HSET', key, 'batch_id', batch, 'batches', batch)
      redis.call('HINCRBY', bk, 'done', 1)
    end
    redis.call('PEXPIRE', key, ttl)
  else
    status = redis.call('HGET', key, 'status')
    if bk then
      -- The reused task is counted in this batch too; an open one moves its counters from now on.
      redis.call('HINCRBY', bk, status, 1)
      if not TERMINAL[status] then
        local m = redis.call('HGET', key, 'batches')
        redis.call('HSET', key, 'batches', m and (m .. ' ' .. batch) or batch)
      end
    end
    if how[i] == 'coalesced' then
      redis.call('PEXPIRE', inflight_key(tenant, ckey), ttl)
      -- A retry under this key finds the task it joined.
      if idem ~= '' then redis.call('SET', idem_key(tenant, idem), id, 'PX', ttl) end
    end
  end
  if bk then
    redis.call('RPUSH', batch_tasks_key(batch), id)
    if logged[id] == nil then
      distinct = distinct + 1
      logged[id] = false
      -- Finished already (a cached result, or a key that names a finished task): it enters
      -- the batch's finished log now; an open one enters when it finishes.
      if TERMINAL[status] then
        logged[id] = true
        redis.call('RPUSH', batch_finished_key(batch), id)
      end
    end
  end
  out[#out + 1] = id
  out[#out + 1] = status
  out[#out + 1] = how[i]
end

if bk then
  redis.call('HSET', bk, 'distinct', distinct)
  expire_batch_if_finished(batch, ttl)
end
if fresh_bytes > 0 then redis.call('HINCRBY', STATS, OPEN_BYTES, fresh_bytes) end
if fresh + cached > 0 then redis.call('HINCRBY', STATS, 'submitted', fresh + cached) end
if cached > 0 then
  redis.call('HINCRBY', STATS, 'done', cached)
  redis.call('HINCRBY', STATS, 'cache_hits', cached)
end
if misses > 0 then redis.call('HINCRBY', STATS, 'cache_misses', misses) end
if coalesced > 0 then redis.call('HINCRBY', STATS, 'coalesced', coalesced) end
for class, n in pairs(woken) do wake(class, n) end
return out
