-- Cancels the open tasks among a chunk of one batch's distinct tasks; the caller sends a few
-- hundred per call, so that no call holds Redis for long however large the batch.
-- A queued task stays in its queue list: an LREM per task would scan the tenant's whole queue
-- once per task (thousands of tasks over a queue of thousands would stall Redis). Claims drop
-- ids whose task is no longer queued (claim.lua's next_task), and everything that quotas, the
-- queue cap and /queue/status read moves in `transition`, here.
-- ARGV: prefix, result_ttl_ms, reason (the tasks' error), task ids...
-- Returns {cancelled_queued, cancelled_running, already_finished}.
local ttl, reason = tonumber(ARGV[2]), ARGV[3]
local now = now_ms()
local queued, running, finished = 0, 0, 0
for i = 4, #ARGV do
  local id = ARGV[i]
  local status = redis.call('HGET', task_key(id), 'status')
  if not status or TERMINAL[status] then
    -- Finished, or finished so long ago that its record expired.
    finished = finished + 1
  else
    if status == 'running' then
      -- The lease token stays so that its holder learns of the cancellation at its renewal.
      redis.call('ZREM', LEASES, id)
      running = running + 1
    else
      queued = queued + 1
    end
    redis.call('HSET', task_key(id), 'error', reason)
    transition(id, status, 'cancelled', now, ttl)
  end
end
return { queued, running, finished }
