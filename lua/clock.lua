-- Flashgate gate: Redis' own clock, in milliseconds. The one place it is read: a prelude of the
-- scripts that time something by the node they run on (shared/src/gate/mod.rs), so that every
-- instance and sweeper measures against one clock whatever theirs say.
local function clock_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
