--[[
  Part of check-and-incr.lua, included where it says --#include calendar.lua (src/store/redis-store.ts
  assembles the script): the locals floor, month_start_day, month_of and bounds, which the shapes use.
]]

-- Days since 1970-01-01 of the first of month m (months since January 1970), from the proleptic Gregorian
-- calendar (H. Hinnant's days_from_civil), and the months since January 1970 of a day: what Date.UTC and
-- getUTCMonth give src/counters/calendar.ts.
local floor = math.floor
local function month_start_day(m)
  local y, mo = 1970 + floor(m / 12), m % 12 + 1
  if mo <= 2 then y = y - 1 end
  local era = floor(y / 400)
  local yoe = y - era * 400
  local mp = mo > 2 and mo - 3 or mo + 9
  return era * 146097 + yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + floor((153 * mp + 2) / 5) - 719468
end
local function month_of(day)
  local z = day + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524) - floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local mo = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if mo <= 2 then y = y + 1 end
  return (y - 1970) * 12 + mo - 1
end

-- A window's index since the epoch and when it ends, as windowBounds computes them.
local function bounds(window, calendar, at)
  if calendar > 0 then
    local i = floor(month_of(floor(at / 86400000)) / calendar)
    return i, month_start_day((i + 1) * calendar) * 86400000
  end
  local shift = 0
  if calendar == -1 then shift = 4 * 86400000 end
  local i = floor((at - shift) / window)
  return i, (i + 1) * window + shift
end
