-- Shared helpers, concatenated in front of every script, after the header Rust makes from the
-- key table (redis_broker/keys.rs, keys/lua.rs): every key name (`STATS`, `task_key(id)`, ...),
-- shared hash field (`OPEN_BYTES`, `activity_field(minute)`, ...) and constant (`ANY`, the queue
-- class of tasks without a device class; `WAKE_MAX`, `WAKE_TTL_MS`, `TERMINAL`, `PRIORITIES`,
-- `ACTIVITY_*`) comes from there, so no script spells one. Every script takes the key prefix as
-- ARGV[1] (single-node Redis; the key layout is not cluster-slotted).

-- One clock for every node: the Redis server's.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A task's queue class: its device class, or ANY.
local function queue_class(class)
  if class and class ~= '' then return class end
  return ANY
end

-- A tenant as the Rust side reads it (redis_broker/tenants.rs, `TENANT_ROW`): {id, name,
-- max_queued, weight, share_cache, created_at}, false where unset; or false when it has no
-- record (unknown, deleted, or the built-in tenant).
local function tenant_row(id)
  local f = redis.call('HMGET', tenant_key(id), 'name', 'max_queued', 'share_cache', 'created_at')
  if not f[1] then return false end
  return { id, f[1], f[2], redis.call('HGET', TENANT_WEIGHTS, id), f[3], f[4] }
end

local function queued_total()
  local n = redis.call('HMGET', QUEUED, unpack(PRIORITIES))
  return (tonumber(n[1]) or 0) + (tonumber(n[2]) or 0) + (tonumber(n[3]) or 0)
end

-- Every queue class that ever had a queued task, ANY included.
local function queue_classes()
  local out = { ANY }
  local h = redis.call('HGETALL', QUEUED_CLASS)
  for i = 1, #h, 2 do
    if h[i] ~= ANY then out[#out + 1] = h[i] end
  end
  return out
end

-- Tasks in the tenant's queues of `classes`.
local function queue_len(tenant, classes)
  local n = 0
  for _, class in ipairs(classes) do
    for _, prio in ipairs(PRIORITIES) do
      n = n + redis.call('LLEN', queue_key(class, tenant, prio))
    end
  end
  return n
end

-- A tenant that gets work for `class`'s workers while it has none enters the class's fair
-- share at the lowest pass of its active tenants, so idle time is never banked as credit.
local function activate(class, tenant)
  local active = active_key(class)
  if redis.call('ZSCORE', active, tenant) then return end
  local head = redis.call('ZRANGE', active, 0, 0, 'WITHSCORES')
  -- The score as Redis wrote it: exact, where Lua's number formatting keeps only 14 digits.
  redis.call('ZADD', active, head[2] or 0, tenant)
end

-- Keeps the open-task counters: `delta` tasks of `tenant`, `prio` and queue class `class`
-- enter (1) or leave (-1) `status`.
local function count_open(tenant, prio, class, status, delta)
  if status == 'queued' then
    redis.call('HINCRBY', QUEUED, prio, delta)
    redis.call('HINCRBY', QUEUED_CLASS, class, delta)
    redis.call('HINCRBY', TENANT_QUEUED, tenant, delta)
    if class == ANY and redis.call('HINCRBY', UNCLASSED, tenant, delta) <= 0 then
      redis.call('HDEL', UNCLASSED, tenant)
    end
  elseif status == 'running' then
    redis.call('HINCRBY', TENANT_RUNNING, tenant, delta)
  end
end

-- One token per newly queued task in the wake list of its class, or of every class that claims
-- for a task of no class, so that as many blocked claimers wake as there is work they can take.
local function wake(class, n)
  n = math.min(n, WAKE_MAX)
  if n <= 0 then return end
  local lists = {}
  if class == ANY then
    local h = redis.call('HGETALL', CLAIM_CLASSES)
    for i = 1, #h, 2 do lists[#lists + 1] = wake_key(h[i]) end
  else
    lists[1] = wake_key(class)
  end
  local tokens = {}
  for i = 1, n do tokens[i] = '1' end
  for _, list in ipairs(lists) do
    redis.call('LPUSH', list, unpack(tokens))
    redis.call('LTRIM', list, 0, WAKE_MAX - 1)
    redis.call('PEXPIRE', list, WAKE_TTL_MS)
  end
end

-- Puts a queued task into its queue: at the back when new, at the front when requeued (it has
-- waited longest). A task of a class makes its tenant active in the class's share at once;
-- tasks of no class are counted in UNCLASSED (by count_open) and join at each claim.
local function enqueue(id, tenant, prio, class, front)
  local q = queue_key(class, tenant, prio)
  if front then
    redis.call('LPUSH', q, id)
  else
    redis.call('RPUSH', q, id)
  end
  if class ~= ANY then activate(class, tenant) end
end

-- A batch is kept for result_ttl after its last open task finished.
local function expire_batch_if_finished(b, ttl)
  local bk = batch_key(b)
  local open = redis.call('HMGET', bk, 'queued', 'running')
  if (tonumber(open[1]) or 0) + (tonumber(open[2]) or 0) <= 0 then
    redis.call('PEXPIRE', bk, ttl)
    redis.call('PEXPIRE', batch_tasks_key(b), ttl)
    redis.call('PEXPIRE', batch_finished_key(b), ttl)
  end
end

-- Recent activity (task-manager/src/activity.rs says what and why; its fields of STATS, which
-- every role that makes a transition may already read and write, are described with the key
-- table).

-- `s` cut to at most `n` bytes, never inside a UTF-8 sequence, with an ellipsis when cut
-- (crucible_shared::clip).
local function clip(s, n)
  if not s or #s <= n then return s end
  local i = n
  while i > 0 do
    local c = s:byte(i + 1)
    if c < 0x80 or c >= 0xC0 then break end
    i = i - 1
  end
  return s:sub(1, i) .. '\226\128\166'
end

-- Counts a task that has just become terminal (`to`) in the bucket of `now`, and lists it when
-- it failed: `failed`, or `done` with a verdict other than ok (activity.rs `is_failure`).
-- `outcome` is {verdict, code, message} for a done task, `err` the task's error.
local function record_activity(id, tenant, to, now, outcome, err)
  local minute = math.floor(now / ACTIVITY_BUCKET_MS)
  local head = tonumber(redis.call('HGET', STATS, ACTIVITY_HEAD))
  if head and minute <= head - ACTIVITY_BUCKETS then return end
  if not head or minute > head then
    -- Every bucket kept lies in [head - ACTIVITY_BUCKETS + 1, head]: drop those that fall out.
    if head then
      local drop = {}
      for old = head - ACTIVITY_BUCKETS + 1, math.min(head, minute - ACTIVITY_BUCKETS) do
        drop[#drop + 1] = activity_field(old)
      end
      if #drop > 0 then redis.call('HDEL', STATS, unpack(drop)) end
    end
    redis.call('HSET', STATS, ACTIVITY_HEAD, minute)
  end
  local field = activity_field(minute)
  local raw = redis.call('HGET', STATS, field)
  local counts = raw and cjson.decode(raw) or { done = 0, failed = 0, cancelled = 0 }
  counts[to] = (counts[to] or 0) + 1
  counts.verdicts = counts.verdicts or {}
  counts.errors = counts.errors or {}
  if outcome then
    counts.verdicts[outcome.verdict] = (counts.verdicts[outcome.verdict] or 0) + 1
    if outcome.code then counts.errors[outcome.code] = (counts.errors[outcome.code] or 0) + 1 end
  end
  redis.call('HSET', STATS, field, cjson.encode(counts))
  if not (to == 'failed' or (to == 'done' and outcome and outcome.verdict ~= 'ok')) then return end
  local listed = redis.call('HGET', STATS, ACTIVITY_FAILURES_FIELD)
  local failures = listed and cjson.decode(listed) or {}
  local message = err
  if outcome then message = outcome.message end
  table.insert(failures, 1, {
    task_id = id, tenant = tenant, at = now, status = to,
    verdict = outcome and outcome.verdict or nil, error_code = outcome and outcome.code or nil,
    message = clip(message, ACTIVITY_MESSAGE_BYTES),
  })
  while #failures > ACTIVITY_FAILURES do table.remove(failures) end
  redis.call('HSET', STATS, ACTIVITY_FAILURES_FIELD, cjson.encode(failures))
end

-- Moves a task from one status to another and keeps everything derived from statuses in step:
-- the counters of every batch the task is counted in (its own, plus batches that reused it
-- through an idempotency key; a batch may count it more than once), the open-task counters,
-- the lifetime stats and, for a terminal status, finished_at, the recent activity, the TTLs of
-- the task and its idempotency key, and the end of its in-flight entry (so no later request
-- joins a finished task). `outcome` ({verdict, code, message}) only for `done`.
local function transition(id, from, to, now, ttl, outcome)
  local key = task_key(id)
  local fields = redis.call('HMGET', key, 'batches', 'idem', 'ckey', 'tenant', 'priority', 'error',
    'class', 'bytes')
  local batches, idem, ckey, tenant, prio = fields[1], fields[2], fields[3], fields[4], fields[5]
  local class = queue_class(fields[7])
  count_open(tenant, prio, class, from, -1)
  count_open(tenant, prio, class, to, 1)
  if batches then
    for b in string.gmatch(batches, '%S+') do
      local bk = batch_key(b)
      if redis.call('EXISTS', bk) == 1 then
        redis.call('HINCRBY', bk, from, -1)
        redis.call('HINCRBY', bk, to, 1)
      end
    end
  end
  redis.call('HSET', key, 'status', to)
  -- `bytes`: what submit.lua counted for the task (absent: queued before the budget existed, so
  -- never counted).
  local bytes = tonumber(fields[8]) or 0
  if TERMINAL[to] and not TERMINAL[from] and bytes > 0 then
    redis.call('HINCRBY', STATS, OPEN_BYTES, -bytes)
  end
  if TERMINAL[to] then
    redis.call('HSET', key, 'finished_at', now)
    redis.call('HINCRBY', STATS, to, 1)
    record_activity(id, tenant, to, now, outcome, fields[6] or nil)
    redis.call('PEXPIRE', key, ttl)
    -- The key may already name a newer task if this one's record had vanished; leave that be.
    if idem and redis.call('GET', idem_key(tenant, idem)) == id then
      redis.call('PEXPIRE', idem_key(tenant, idem), ttl)
    end
    if ckey and redis.call('GET', inflight_key(tenant, ckey)) == id then
      redis.call('DEL', inflight_key(tenant, ckey))
    end
    if batches then
      local logged = {}
      for b in string.gmatch(batches, '%S+') do
        if not logged[b] and redis.call('EXISTS', batch_key(b)) == 1 then
          logged[b] = true
          redis.call('RPUSH', batch_finished_key(b), id)
          expire_batch_if_finished(b, ttl)
        end
      end
    end
  end
end

-- The end of a running attempt that produced no verdict: back to the head of its class's
-- queue (it has waited longest) or, once every attempt is used, failed with `reason`.
local function requeue_or_fail(id, max_attempts, ttl, now, reason)
  local key = task_key(id)
  redis.call('ZREM', LEASES, id)
  local f = redis.call('HMGET', key, 'attempts', 'priority', 'tenant', 'class')
  if (tonumber(f[1]) or 0) >= max_attempts then
    redis.call('HSET', key, 'error', reason)
    transition(id, 'running', 'failed', now, ttl)
    return 'failed'
  end
  redis.call('HDEL', key, 'worker_id', 'lease_token', 'started_at')
  transition(id, 'running', 'queued', now, ttl)
  local class = queue_class(f[4])
  enqueue(id, f[3], f[2], class, true)
  redis.call('HINCRBY', STATS, 'requeued', 1)
  wake(class, 1)
  return 'requeued'
end
