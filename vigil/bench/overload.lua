-- wrk script of `vigil bench --overload` (vigil/bench/overload.py).
--
-- POSTs pre-encoded OTLP protobuf bodies round-robin. Every trace id in a body starts with the
-- 8-byte marker "VIGILTID"; each request replaces it with 4 bytes of thread number and 4 bytes
-- of a per-thread request number, so that every request carries runs no other request has
-- (the store can then be checked group by group: a request's runs are stored all or none).
-- Arguments (after `--`): the body files. The summary is one line starting VIGIL_OVERLOAD.

local threads = {}
local next_thread = 1

function setup(thread)
  thread:set("tid", next_thread)
  next_thread = next_thread + 1
  table.insert(threads, thread)
end

local MARKER = "VIGILTID"
local bodies = {}
local count = 0
local seq = 0
c200, c503, c503_retry_after, cother = 0, 0, 0, 0

local function pieces_of(data)
  local pieces, pos = {}, 1
  while true do
    local i, j = string.find(data, MARKER, pos, true)
    if not i then
      pieces[#pieces + 1] = string.sub(data, pos)
      return pieces
    end
    pieces[#pieces + 1] = string.sub(data, pos, i - 1)
    pos = j + 1
  end
end

local function be32(x)
  return string.char(bit.band(bit.rshift(x, 24), 255), bit.band(bit.rshift(x, 16), 255),
                     bit.band(bit.rshift(x, 8), 255), bit.band(x, 255))
end

function init(args)
  for _, path in ipairs(args) do
    local f = assert(io.open(path, "rb"))
    local data = f:read("*a")
    f:close()
    count = count + 1
    bodies[count] = pieces_of(data)
  end
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/x-protobuf"
end

function request()
  seq = seq + 1
  local body = table.concat(bodies[(seq % count) + 1], be32(tid) .. be32(seq))
  return wrk.format(nil, "/v1/traces", nil, body)
end

function response(status, headers, body)
  if status == 200 then
    c200 = c200 + 1
  elseif status == 503 then
    c503 = c503 + 1
    if headers["Retry-After"] or headers["retry-after"] then
      c503_retry_after = c503_retry_after + 1
    end
  else
    cother = cother + 1
  end
end

function done(summary, latency, requests)
  local t = { c200 = 0, c503 = 0, c503_retry_after = 0, cother = 0 }
  for _, thread in ipairs(threads) do
    for k, _ in pairs(t) do
      t[k] = t[k] + thread:get(k)
    end
  end
  local e = summary.errors
  io.write(string.format(
    "VIGIL_OVERLOAD duration_us=%d requests=%d bytes=%d c200=%d c503=%d c503_retry_after=%d cother=%d " ..
    "connect=%d read=%d write=%d status=%d timeout=%d p50_us=%d p99_us=%d\n",
    summary.duration, summary.requests, summary.bytes, t.c200, t.c503, t.c503_retry_after, t.cother,
    e.connect, e.read, e.write, e.status, e.timeout, latency:percentile(50), latency:percentile(99)))
end
