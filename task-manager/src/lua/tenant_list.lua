-- Every tenant. ARGV: prefix. Returns, flat, the tenant_row (prelude) of each.
local out = {}
local names = redis.call('HGETALL', TENANT_NAMES)
for i = 2, #names, 2 do
  local row = tenant_row(names[i])
  if row then
    for j = 1, #row do out[#out + 1] = row[j] end
  end
end
return out
