-- Open tasks per tenant. ARGV: prefix.
-- Returns, flat, per tenant with a counter: id, queued, running, name (nil for the built-in
-- tenant, which has no record, and for a deleted one still being purged).
local rows, order = {}, {}
local function add(hash, col)
  local h = redis.call('HGETALL', hash)
  for i = 1, #h, 2 do
    local id = h[i]
    if not rows[id] then
      rows[id] = { 0, 0 }
      order[#order + 1] = id
    end
    rows[id][col] = tonumber(h[i + 1]) or 0
  end
end
add(TENANT_QUEUED, 1)
add(TENANT_RUNNING, 2)
local out = {}
for _, id in ipairs(order) do
  out[#out + 1] = id
  out[#out + 1] = rows[id][1]
  out[#out + 1] = rows[id][2]
  out[#out + 1] = redis.call('HGET', tenant_key(id), 'name')
end
return out
