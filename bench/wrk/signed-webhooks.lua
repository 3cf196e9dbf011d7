-- wrk script: signed webhooks in the realistic mix, an independent load generator for the
-- side-by-side benches (bench/wrk.ts runs it). Each request is a new event with its own body,
-- signed when it is made (HMAC-SHA256 through LuaJIT's FFI into the libcrypto wrk links), so
-- that no target sees a body twice. The events have the shape of src/simulator/load-generator.ts's
-- mix (three delivery statuses per inbound customer message, bodies of WRK_BODY_MIN..MAX bytes
-- padded with callbackData or context), written here again on purpose: a second implementation.
--
-- Environment:
--   WRK_SECRET            the signing secret (required)
--   WRK_PATH              the webhook path, e.g. /webhooks/biz_1 (required)
--   WRK_PER_TOPIC         1: post each event to WRK_PATH/{topic}
--   WRK_STATUSES_ONLY     1: delivery statuses only (a receiver that takes only those)
--   WRK_BODY_MIN, _MAX    body size range in bytes (300, 600)
--   WRK_ACCEPT_ENCODING   gzip (the default, as the provider's requests carry it) or none
-- done() prints one JSON line: requests, the answers over 399, socket errors, latency in µs.

local ffi = require("ffi")
ffi.cdef([[
typedef struct evp_md_st EVP_MD;
const EVP_MD *EVP_sha256(void);
unsigned char *HMAC(const EVP_MD *md, const void *key, int key_len, const unsigned char *d, size_t n,
                    unsigned char *out, unsigned int *out_len);
int EVP_EncodeBlock(unsigned char *t, const unsigned char *f, int n);
]])
-- wrk is linked with libcrypto, so its symbols are in the process already.
local crypto = ffi.C
local SHA256 = crypto.EVP_sha256()
local mac = ffi.new("unsigned char[32]")
local macLength = ffi.new("unsigned int[1]")
local encoded = ffi.new("unsigned char[48]")

local function env(name, default)
  local v = os.getenv(name)
  if v == nil or v == "" then
    if default == nil then error(name .. " is required") end
    return default
  end
  return v
end

local SECRET = env("WRK_SECRET")
local PATH = env("WRK_PATH")
local PER_TOPIC = env("WRK_PER_TOPIC", "0") == "1"
local STATUSES_ONLY = env("WRK_STATUSES_ONLY", "0") == "1"
local BODY_MIN = tonumber(env("WRK_BODY_MIN", "300"))
local BODY_MAX = tonumber(env("WRK_BODY_MAX", "600"))
local ACCEPT_ENCODING = env("WRK_ACCEPT_ENCODING", "gzip")
if ACCEPT_ENCODING ~= "gzip" and ACCEPT_ENCODING ~= "none" then error("WRK_ACCEPT_ENCODING is gzip or none") end
local STATUSES_PER_INBOUND = 3

local function sign(body)
  crypto.HMAC(SHA256, SECRET, #SECRET, body, #body, mac, macLength)
  local n = crypto.EVP_EncodeBlock(encoded, mac, macLength[0])
  return ffi.string(encoded, n)
end

local BUSINESS = '"channelType":"whatsapp","id":"+15550001000","name":"Acme Support"'
local TEXTS = {
  "Hi, where is my order?",
  "Can I change the delivery address for my parcel please",
  "Thanks, got it!",
  "Is the store open on Sunday?",
  "I would like to cancel my appointment tomorrow",
  "Yes please",
  "What time will the courier arrive?",
  "The item arrived damaged, what should I do?",
}
local NAMES = { "Ana", "Ben", "Chloé", "Dmitri", "Emeka", "Fatima", "Grace", "Hiro", "Ines", "Jonas", "Kofi", "Lena" }
local CAMPAIGNS = { "order-updates", "appointment-reminders", "support", "delivery-notifications" }
local STATUSES = { "sent", "delivered", "read" }
local CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

local function pick(list)
  return list[math.random(#list)]
end

-- Per thread (each wrk thread has its own Lua state): its counters and its random hex; its
-- number is the global threadId, which setup() sets in the thread's state before init().
threadId = 0
local index = 0
local unit = 0
local customer, messageId
local hex

function setup(thread)
  setup_count = (setup_count or 0) + 1
  thread:set("threadId", setup_count)
end

function init()
  math.randomseed(os.time() * 1000 + threadId)
  local digits = {}
  for i = 1, 8192 do
    digits[i] = string.format("%08x", math.random(0, 0x7fffffff))
  end
  hex = table.concat(digits)
end

local function pad(prefix, length)
  local n = length - #prefix
  if n <= 0 then return prefix end
  local from = math.random(1, #hex - n)
  return prefix .. hex:sub(from, from + n - 1)
end

-- Closes `base` (a JSON object without its last brace) with `field` last, holding a token that
-- starts with `prefix`, to reach `target` bytes where it can (always at least the prefix: the
-- prefix carries the thread and the counter, which make every body unique).
local function sized(base, target, field, open, close, prefix)
  local head = base .. ',"' .. field .. '":' .. open
  local room = target - #head - #close
  return head .. pad(prefix, room) .. close
end

local function nextEvent()
  local position = index % (STATUSES_PER_INBOUND + 1)
  index = index + 1
  local target = math.random(BODY_MIN, BODY_MAX)
  local timestamp = tostring(os.time())
  if position == 0 then
    unit = unit + 1
    customer = string.format("+1555%07d", math.random(0, 9999999))
    if STATUSES_ONLY then return nextEvent() end
    local name = pick(NAMES) .. " " .. string.char(64 + math.random(26)) .. "."
    local base = '{"timestamp":"' .. timestamp .. '","sender":{"channelType":"whatsapp","id":"' .. customer
      .. '","name":"' .. name .. '"},"recipient":{' .. BUSINESS .. '},"message":{"text":"' .. pick(TEXTS) .. '"}'
    local prefix = "conv-" .. threadId .. "-" .. unit .. "-"
    return "messages", sized(base, target, "context", '{"conversationId":"', '"}}', prefix)
  end
  local step = (position - 1) % #STATUSES
  if step == 0 then
    -- 26 characters like a ULID: a prefix, the thread, the counter, then random characters.
    local tail = {}
    for i = 1, 10 do
      local k = math.random(32)
      tail[i] = CROCKFORD:sub(k, k)
    end
    messageId = string.format("01J%02d%011d%s", threadId % 100, unit, table.concat(tail))
  end
  local base = '{"topic":"delivery_status","timestamp":"' .. timestamp .. '","sender":{' .. BUSINESS
    .. '},"recipient":{"channelType":"whatsapp","id":"' .. customer .. '","name":null},"statusUpdate":{"id":"'
    .. messageId .. '","status":"' .. STATUSES[step + 1] .. '","error":null},"metadata":{"campaign":"'
    .. pick(CAMPAIGNS) .. '","pricingCategory":"utility","conversationId":"conv-' .. unit .. '"}'
  local prefix = "order-" .. threadId .. "-" .. unit .. "|"
  return "delivery_status", sized(base, target, "callbackData", '"', '"}', prefix)
end

local headers = { ["Content-Type"] = "text/plain; charset=utf-8" }
if ACCEPT_ENCODING == "gzip" then headers["Accept-Encoding"] = "gzip" end

function request()
  local topic, body = nextEvent()
  headers["X-Service-Hmac-Sha256"] = sign(body)
  local path = PER_TOPIC and (PATH .. "/" .. topic) or PATH
  return wrk.format("POST", path, headers, body)
end

function done(summary, latency)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"durationUs":%d,"status":%d,"connect":%d,"read":%d,"write":%d,"timeout":%d,'
      .. '"latencyUs":{"p50":%d,"p90":%d,"p99":%d,"p999":%d,"max":%d}}\n',
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9), latency.max))
end
