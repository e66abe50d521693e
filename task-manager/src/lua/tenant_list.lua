-- Every tenant. ARGV: prefix. Returns, flat, per tenant: id, TENANT_FIELDS... (nil where unset).
local out = {}
local names = redis.call('HGETALL', TENANT_NAMES)
for i = 2, #names, 2 do
  local id = names[i]
  local f = redis.call('HMGET', tenant_key(id), unpack(TENANT_FIELDS))
  if f[1] then
    out[#out + 1] = id
    for j = 1, #TENANT_FIELDS do out[#out + 1] = f[j] end
  end
end
return out
