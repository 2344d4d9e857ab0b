-- Meridian's Lua prelude: Redis 7's script environment, built once per interpreter with full
-- privileges, then sealed. It receives the hidden table of Rust primitives (`hidden`) and the
-- real global table (`real`); scripts only ever see `env`, a read-only view of `real`.
local hidden, real = ...

local error, type, rawget, rawset, select, tostring, tonumber, setmetatable, getmetatable =
  error, type, rawget, rawset, select, tostring, tonumber, setmetatable, getmetatable
local real_pcall, real_loadstring, setfenv, getfenv = pcall, loadstring, setfenv, getfenv
local concat = table.concat
local readonly = setmetatable({}, { __mode = 'k' })

local function refuse_write()
  error('Attempt to modify a readonly table', 2)
end

-- A read-only view of `t`: reads go through (to `index` if given), writes (and metatable
-- changes) are refused.
local function protect(t, index)
  local meta = { __index = index or t, __newindex = refuse_write }
  local view = setmetatable({}, meta)
  local meta_view = setmetatable({}, { __index = meta, __newindex = refuse_write })
  meta.__metatable = meta_view
  readonly[view] = true
  readonly[meta_view] = true
  return view
end

-- redis.* ---------------------------------------------------------------------------------
local redis = {}
-- call and pcall are the node's, set for each run; the others are Rust's, so that their
-- errors keep the script's own line as the place they were raised.
redis.sha1hex = hidden.sha1hex
redis.setresp = hidden.setresp
redis.log = hidden.log
redis.set_repl = hidden.set_repl
hidden.redis = redis
local function single_field(field, ...)
  local v = ...
  if select('#', ...) ~= 1 or type(v) ~= 'string' then
    return { err = 'ERR wrong number or type of arguments' }
  end
  return { [field] = v }
end
-- As Redis: the code is the first word (after a leading '-'), `ERR` when there is no
-- space; the message loses leading and trailing CR/LF.
function redis.error_reply(...)
  local r = single_field('err', ...)
  local e = r.err
  if e:sub(1, 1) == '-' then
    e = e:sub(2)
  end
  local space = e:find(' ', 1, true)
  local code, msg = 'ERR', e
  if space then
    code, msg = e:sub(1, space - 1), e:sub(space + 1)
  end
  msg = (msg:gsub('^[\r\n]+', ''))
  msg = (msg:gsub('[\r\n]+$', ''))
  r.err = code .. ' ' .. msg
  return r
end
function redis.status_reply(...)
  return single_field('ok', ...)
end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
function redis.replicate_commands()
  return true
end
function redis.breakpoint()
  return false
end
function redis.debug() end
redis.REDIS_VERSION = hidden.version
redis.REDIS_VERSION_NUM = hidden.version_num
real.redis = protect(redis)

-- The sandbox --------------------------------------------------------------------------------
-- pcall as Redis 7 has it: an error table comes back as its message.
-- Nothing catches the error of a killed script: each protected call re-raises it.
local killed = hidden.killed
local function pcall_result(ok, ...)
  if ok then
    return true, ...
  end
  local e = ...
  if killed() then
    error(e, 0)
  end
  if type(e) == 'table' and type(rawget(e, 'err')) == 'string' then
    return false, e.err
  end
  return false, hidden.message(e)
end
real.pcall = function(f, ...)
  return pcall_result(real_pcall(f, ...))
end
local real_xpcall = xpcall
local function unless_killed(ok, ...)
  if not ok and killed() then
    error((...), 0)
  end
  return ok, ...
end
real.xpcall = function(f, h)
  return unless_killed(real_xpcall(f, h))
end
local real_resume = coroutine.resume
coroutine.resume = function(co, ...)
  return unless_killed(real_resume(co, ...))
end

local env
-- Compiled bytecode is refused: it can crash the interpreter.
local function is_binary(s)
  return type(s) == 'string' and s:byte(1) == 27
end
real.loadstring = function(s, name)
  if is_binary(s) then
    return nil, 'binary chunks are not allowed'
  end
  local f, e = real_loadstring(s, name)
  if f then
    setfenv(f, env)
  end
  return f, e
end
real.load = function(reader, name)
  local src = reader
  if type(reader) == 'function' then
    local parts = {}
    while true do
      local piece = reader()
      if piece == nil or piece == '' then
        break
      end
      parts[#parts + 1] = piece
    end
    src = concat(parts)
  end
  return real.loadstring(src, name)
end
real.setmetatable = function(t, m)
  if readonly[t] then
    refuse_write()
  end
  return setmetatable(t, m)
end
real.rawset = function(t, k, v)
  if readonly[t] then
    refuse_write()
  end
  return rawset(t, k, v)
end
-- setfenv may not touch the running thread nor a function of the environment itself.
real.setfenv = function(f, t)
  if readonly[t] then
    refuse_write()
  end
  if type(f) == 'number' then
    if f == 0 then
      refuse_write()
    end
    f = f + 1
  end
  if getfenv(f) == real then
    refuse_write()
  end
  return setfenv(f, t)
end
real.math.random = hidden.random
real.math.randomseed = hidden.randomseed
for _, name in ipairs({ 'dofile', 'loadfile', 'print', 'module', 'require' }) do
  real[name] = nil
end
for _, name in ipairs({ 'string', 'math', 'table', 'coroutine', 'cjson', 'cmsgpack', 'bit', 'struct' }) do
  if real[name] then
    real[name] = protect(real[name])
  end
end
-- Strings' methods come from the protected string table, and their metatable is sealed.
local string_meta = getmetatable('')
string_meta.__index = real.string
string_meta.__metatable = protect({})

-- While FUNCTION LOAD runs a library's body, its globals are only the library API (Redis 7:
-- `redis` with register_function, log and the version); its functions, once called, see the
-- whole environment, and no register_function.
local library_redis = {
  register_function = hidden.register_function,
  log = redis.log,
  LOG_DEBUG = redis.LOG_DEBUG,
  LOG_VERBOSE = redis.LOG_VERBOSE,
  LOG_NOTICE = redis.LOG_NOTICE,
  LOG_WARNING = redis.LOG_WARNING,
  REDIS_VERSION = redis.REDIS_VERSION,
  REDIS_VERSION_NUM = redis.REDIS_VERSION_NUM,
}
-- Unlike the scripts' `redis`, a missing field is an error, as Redis's library API has it.
local function strict(t)
  return protect(t, function(_, k)
    local v = t[k]
    if v == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
    end
    return v
  end)
end
local library_api = { redis = strict(library_redis) }
local loading = false
hidden.set_loading = function(on)
  loading = on
end

-- The scripts' global table: reads of unknown names and every write are refused.
local env_meta = {
  __index = function(_, k)
    local v = rawget(loading and library_api or real, k)
    if v == nil then
      error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
    end
    return v
  end,
  __newindex = refuse_write,
}
env = setmetatable({}, env_meta)
env_meta.__metatable = protect({})
readonly[env] = true
real._G = env
-- The environment of a function created before the seal (the libraries') is the real table:
-- scripts are shown their own instead.
real.getfenv = function(f)
  if f == nil then
    f = 1
  end
  if type(f) == 'number' then
    if f == 0 then
      return env
    end
    f = f + 1
  end
  local e = getfenv(f)
  if e == real then
    return env
  end
  return e
end
setfenv(0, env)
return env
