-- Shared helpers, concatenated in front of every script. Every script takes the key prefix as
-- ARGV[1] and builds its keys from it (single-node Redis; the key layout is not cluster-slotted).
-- The layout, and which role's ACL user reaches which key, is described in
-- redis_broker/keys.rs; the names below spell it.

local P = ARGV[1]
local STATS = P .. ':stats'
local LEASES = P .. ':leases'
-- The holder of the cluster's reaper lease (a string expiring with the lease): the one process
-- of those running the reaper that reaps.
local REAPER = P .. ':reaper'
-- The queue class of tasks without a device class (no device class may be named so).
local ANY = 'any'
-- '{class}:{tenant id}' -> claims the class's workers served the tenant: its place in the
-- priority cycle.
local CLAIM_SEQ = P .. ':claim_seq'
-- Tasks in status queued per priority, per queue class (`any` included) and queued / running
-- per tenant id; kept by the transitions below, so quotas, the cap and the views are read in
-- O(1). QUEUED_CLASS keeps a field for every class that ever had a queued task: the list of
-- queue classes a deleted tenant's tasks may be in.
local QUEUED = P .. ':queued'
local QUEUED_CLASS = P .. ':queued_class'
local TENANT_QUEUED = P .. ':tenant_queued'
local TENANT_RUNNING = P .. ':tenant_running'
-- Tenant id -> its queued tasks of no class: the tenants each claim enters into its class's
-- fair share.
local UNCLASSED = P .. ':unclassed'
-- Device class -> when a worker of it last claimed: the classes whose wake lists a task of no
-- class wakes, and whose fair shares a deleted tenant leaves.
local CLAIM_CLASSES = P .. ':claim_classes'
-- Tenant id -> its weight in the fair share: the one setting a claim reads, kept out of the
-- registry so that workers never need to read it.
local TENANT_WEIGHTS = P .. ':tenant_weights'
-- The tenant registry: every key that names a tenant or holds its token's SHA-256 or its
-- settings lives under REGISTRY, which only the API's ACL user may reach (deploy/redis.conf).
local REGISTRY = P .. ':tenants:'
-- Tenant name -> id, and token SHA-256 -> id.
local TENANT_NAMES = REGISTRY .. 'names'
local TOKENS = REGISTRY .. 'tokens'
-- Id of a deleted tenant whose queued tasks are still being cancelled -> the error they get.
local PURGING = REGISTRY .. 'purging'
local WAKE_MAX = 1024
-- Tokens only matter to claimers blocked right now; an unread token is useless after a while.
local WAKE_TTL_MS = 60000

local TERMINAL = { done = true, failed = true, cancelled = true }
-- Field of STATS: the spec bytes of open (queued or running) tasks, which the queue byte budget
-- (queue_cap_bytes) bounds. Added at submission, taken off when a task becomes terminal.
local OPEN_BYTES = 'open_bytes'

-- One clock for every node: the Redis server's.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function task_key(id) return P .. ':task:' .. id end
local function batch_key(b) return P .. ':batch:' .. b end
local function batch_tasks_key(b) return P .. ':batch:' .. b .. ':tasks' end
-- Distinct tasks of the batch in the order they finished (each once): what a reader of the
-- batch's results pages through.
local function batch_finished_key(b) return P .. ':batch:' .. b .. ':finished' end
-- Tenant ids (`tn_...`) and device classes hold no ':', so these keys cannot spell one
-- another. `class` is a device class or ANY.
local function queue_key(class, tenant, prio)
  return P .. ':queue:' .. class .. ':' .. tenant .. ':' .. prio
end
-- Tenants with work for the workers of `class` (tasks of the class; those with tasks of no
-- class join at the class's claims), scored by their pass in the class's fair share (fair.rs).
local function active_key(class) return P .. ':active:' .. class end
-- The list a blocked claimer of `class` BLPOPs on.
local function wake_key(class) return P .. ':wake:' .. class end
-- A task's queue class: its device class, or ANY.
local function queue_class(class)
  if class and class ~= '' then return class end
  return ANY
end
local function idem_key(tenant, k) return P .. ':idem:' .. tenant .. ':' .. k end
local function tenant_key(tenant) return REGISTRY .. 'record:' .. tenant end
-- `ckey` is the scoped result cache key (cache scope, ':', hex SHA-256 of the request); `ns`
-- the cache namespace of the task's tenant (its id, or the one shared namespace). In-flight
-- entries are always the tenant's own: coalescing never crosses tenants.
local function rcache_key(ns, ckey) return P .. ':rcache:' .. ns .. ':' .. ckey end
local function inflight_key(tenant, ckey) return P .. ':inflight:' .. tenant .. ':' .. ckey end
-- The namespace is length-prefixed so that no (namespace, key) pair spells another's key.
local function kv_key(ns, key) return P .. ':kv:' .. #ns .. ':' .. ns .. ':' .. key end

-- A tenant as the Rust side reads it (redis_broker/tenants.rs, `TENANT_ROW`): {id, name,
-- max_queued, weight, share_cache, created_at}, false where unset; or false when it has no
-- record (unknown, deleted, or the built-in tenant).
local function tenant_row(id)
  local f = redis.call('HMGET', tenant_key(id), 'name', 'max_queued', 'share_cache', 'created_at')
  if not f[1] then return false end
  return { id, f[1], f[2], redis.call('HGET', TENANT_WEIGHTS, id), f[3], f[4] }
end

local function queued_total()
  local n = redis.call('HMGET', QUEUED, 'high', 'normal', 'low')
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
    for _, prio in ipairs({ 'high', 'normal', 'low' }) do
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

-- Recent activity (task-manager/src/activity.rs says what and why; the ACTIVITY_* constants
-- come from the header Rust puts in front of every script). Fields of STATS, which every role
-- that makes a transition may already read and write: `activity:{minute}` the JSON counts of
-- the tasks that finished in that minute of Redis time, only the last ACTIVITY_BUCKETS kept;
-- `activity:head` the newest minute written; `activity:failures` a JSON array of the latest
-- ACTIVITY_FAILURES failures, newest first.
local ACTIVITY_HEAD = 'activity:head'
local ACTIVITY_FAILURES_FIELD = 'activity:failures'
local function activity_field(minute) return 'activity:' .. minute end

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
