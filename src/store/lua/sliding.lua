--[[
  Part of check-and-incr.lua, included where it says --#include sliding.lua: sliding windows
  (src/limits/kinds/sliding-window.ts). Two fixed windows' counts, <base>:<index> and <base>:<index - 1>,
  the previous one weighted by how much of it still overlaps the last window's length; written as a fixed
  window is (fixed.lua's window_add). Uses the script's locals: now, cur, old, count.
]]

-- The current window's count, the previous one's, and the estimate a decision weighs.
local function sliding_read(j, w)
  local c, p = count(cur[j]), count(old[j])
  return c, p, (p * (w.window - (now % w.window))) / w.window + c
end
