#!lua name=sortie
--[[
sortie's Functions library: every state change of a job is one call to one
function below, run atomically by the server. redisstore (Go) loads it at
start (FUNCTION LOAD), checks its version, and calls it with FCALL.

Conventions, shared by every function:

  * ARGV[1] is the mode ('s' one server, 'c' Redis Cluster; see setup)
    followed by the key prefix P of the store; every key is built from P.
  * A job ID travels and is stored as 16 decimal digits, zero-padded, so
    that string order is number order: members of the state sets, keys,
    lists. Times are microseconds since the Unix epoch as 18 digits,
    zero-padded ("0" for none in arguments), so a lane member (priority,
    RunAt, ID) is a plain concatenation. Both are formatted by the caller;
    the library formats only the IDs it hands out and the few times it
    computes. Job times (RunAt, lease expiries, CreatedAt, FinalizedAt)
    come from the caller's params (the store's callers read one clock,
    which tests can move), never from the server's. The server's clock
    (TIME, clock_us) is read only as the floor of new job IDs and claim
    tokens (new_values) and for the expiry of waiting claims (waits).
  * A queue q lives in group g = a number from 0 to 16383 that the Go side
    derives from q's name; every key of the queue and of its jobs carries
    the hash tag {g}, so on Redis Cluster a queue and its jobs live on one
    slot and a function touching one queue stays on one slot. A job's ID is
    handed out by new_ids and holds no group: on one server the job's hash
    is P:j:<id>, on a cluster P:{g}:j:<id> (see is_new). A job of an
    earlier version has an ID seq*16384 + g, giving its group; an imported
    job keeps the ID another store gave it, and when that ID is below
    NEW_ID and gives another group than its queue's, P:fid records its
    group (see gof):
      P:{g}:j:<id>          hash: the job (fields listed at load_job);
                            P:j:<id> for a new ID on one server
      P:{g}:j:<id>:dn       set: waiting jobs that depend on this one
      P:{g}:j:<id>:cc       set: jobs cancelled because this one ended badly
      P:{g}:j:<id>:sm       hash: the job's durable steps, name -> meta
                            (see step_meta)
      P:{g}:j:<id>:sr       hash: a step's name -> its JSON result
      P:{g}:j:<id>:sc       hash: a spawn step's name -> its children's
                            IDs, comma-separated, in order
      P:{g}:tok             string: the group's last claim token
      P:{g}:w:<qlen>:<q>    shard channel: "jobs of q may be available"
      P:{g}:done            shard channel: IDs of jobs that just finished
    and per queue, under QP = P:{g}:q<len(q)>:<q>: (length-prefixed, so no
    queue name can reach another's keys):
      QP h                  zset (score 0, by member): the head of every
                            non-empty lane: lexkey .. laneid
      QP L:<laneid>         list: a lane's available jobs that arrived
                            in claim order, laneid = priority kind \0
                            partition key, member lexkey = priority (1
                            digit), RunAt (18 digits), ID (16 digits), so
                            member order is claim order (Priority, RunAt,
                            ID); may hold stale members (see the lanes)
      QP l:<laneid>         zset (score 0, by member): the lane's
                            available jobs that arrived out of order
      QP s                  zset by RunAt: scheduled and retrying jobs
      QP r                  zset by LeaseUntil: running jobs (ZCARD is the
                            running count; rescue reads the expired range)
      QP i:<state>          zset: one per state but running (QP r
                            serves), the buckets of the state's ID index
                            (listing), member and score a bucket's start
                            (see index_add)
      QP i:<state>:<start>  zset: a bucket, up to BUCKET job IDs (member
                            and score the ID)
      QP n                  hash: state -> count of the queue's jobs in
                            it (all but running: ZCARD of QP r)
      QP x:<state>          zset (score 0, by member): the ID index of
                            library versions before 13, until
                            sortie_index_migrate moves it
      QP F:<state>          list: for completed, cancelled and dead, the
                            jobs that finished in order, member
                            FinalizedAt (18 digits) and ID (16): what
                            pruning reads, oldest first; may hold stale
                            members (see the finished sets)
      QP f:<state>          zset by FinalizedAt: the same state's jobs
                            that finished out of order
      QP cfg                hash: settings, paused, dropped, updated
      QP rate               zset by start time: the queue's recent starts
      QP pr:<part>          zset by start time: a partition's recent starts
      QP prun               hash: running jobs per partition key
      QP hc                 hash: history counts (store.Store.JobHistory),
                            field minute (18 digits: the minute's start)
                            ':' outcome (completed, cancelled, dead,
                            retried) -> jobs of the queue that reached
                            it in that minute
      QP hm                 zset by minute: the minutes QP hc has fields
                            of (member: the minute as in hc's fields)
    and store-wide (on a cluster, see setup):
      P:seq                 string: the last job ID handed out (new_ids;
                            below NEW_ID: an earlier version's sequence)
      P:fid                 hash: ID -> group of each imported job whose ID
                            gives another group (id mod 16384) than its
                            queue's, where its keys are; written by the
                            Go side before the jobs (sortie_import), and
                            forgotten when the job is deleted or pruned
      P:queues              set: every queue ever used
      P:u                   hash: unique key -> ID of its pending holder
                            (P:{g}:u per group on a cluster)
      P:periodic            hash: schedule name -> last slot
                            (P:{g}:periodic per group on a cluster)
      P:periodic:at         hash: schedule name -> updated at
  * Errors the caller must map to the store's errors come back as a table
    {'E', code, ...}; anything else a function cannot do is a script error
    (redis.error_reply), never swallowed.
  * Every loop is bounded: by the batch the caller sent, by a limit in the
    arguments, or by the jobs one workflow links together (a dependency
    cascade visits each job of the graph at most once).
  * Lua allows a chunk 200 local names: a part whose helpers the rest
    does not call keeps them inside a do-block (the ID indexes, their
    functions).
]]

local LIB_VERSION = {{VERSION}}
-- START_AHEAD is store.MaxStartAhead in µs: how far a fetch's now may be
-- ahead of another's; a rate window keeps its starts that much longer.
local START_AHEAD = {{START_AHEAD}}
local MSG_DEP_ENDED = {{MSG_DEP_ENDED}}       -- format: dep ID, state
local MSG_DEP_DELETED = {{MSG_DEP_DELETED}}   -- format: dep ID
local MSG_DROPPED = {{MSG_DROPPED}}           -- format: queue, max depth
local MSG_NO_ERROR = {{MSG_NO_ERROR}}
local MSG_LEASE_LOST = {{MSG_LEASE_LOST}}
local MSG_PARENT_CANCELLED = {{MSG_PARENT_CANCELLED}} -- format: parent ID
local MSG_PARENT_DELETED = {{MSG_PARENT_DELETED}}     -- format: parent ID
local PROMOTE_MAX = 1000   -- due scheduled jobs moved to their lanes per fetch
local SKIP_MAX = 1000      -- lanes a fetch may pass over (other kinds, full partitions)
local STALE_MAX = {{STALE_MAX}} -- stale lane members a fetch may drop (see the lanes)
local CHUNK = 1000         -- arguments per command when a call sends many

local GROUPS = 16384
local P = ''
local CLUSTER = false
-- CG is the key group of the call's KEYS[1] on a cluster (see register):
-- every job a call touches there is in that group.
local CG = nil
-- fids caches, per call, the groups P:fid records (false: P:fid is empty).
local fids = nil

-- setup reads ARGV[1] of every call: 's' (one server) or 'c' (Redis
-- Cluster), then the key prefix P. On one server the store-wide keys are
-- store-wide: unique keys (P:u), the ID sequence (P:seq), the queue list
-- (P:queues). On a cluster a function may touch one slot only, so unique
-- keys are kept per key group (P:{g}:u), and the caller reserves IDs and
-- lists queues itself.
local function setup(a)
  CLUSTER = string.sub(a, 1, 1) == 'c'
  P = string.sub(a, 2)
end

local function ukey(g)
  if CLUSTER then return P .. ':{' .. g .. '}:u' end
  return P .. ':u'
end

local PENDING = { waiting = true, scheduled = true, available = true, running = true, retrying = true }
local FINISHED = { completed = true, cancelled = true, dead = true }
local QUEUED_STATES = { 'waiting', 'scheduled', 'available', 'retrying' }

-- string.format's %d formats a whole number up to 2^63 as an integer, a
-- good deal cheaper than %.0f's float formatting.
local function pad(n) return string.format('%016d', n) end
local function tpad(n) return string.format('%018d', n) end
local function natural_group(id) return string.format('%d', math.fmod(tonumber(id), GROUPS)) end

-- Job IDs. A job's ID is handed out by new_values (below) from P:seq,
-- and is at least 2^50 (NEW_ID). IDs below that were handed out by
-- earlier versions as seq*16384 + g, where g is the job's group; those
-- jobs keep their keys. A new ID holds no group: on one server the job's
-- hash is P:j:<id>, whatever its group, and keeps its queue's group in
-- field g; on a cluster it is P:{g}:j:<id> in its queue's group, which
-- the caller knows (every job a cluster call touches is in its group).
local NEW_ID = 1125899906842624
local function is_new(id) return tonumber(id) >= NEW_ID end

-- gof returns the group of job id: its queue's. On a cluster it is the
-- call's group: a call touches one slot, and a job linked to one of the
-- call's (dependency, dependent, unique key holder) is in the same
-- group, or is not in the store. On one server a new ID's job keeps it in
-- field g; an older one's is the group its ID gives, unless P:fid records
-- another (an imported job).
local function gof(id)
  if CLUSTER then return CG end
  if fids == nil then
    fids = false
    if redis.call('EXISTS', P .. ':fid') == 1 then fids = {} end
  end
  if is_new(id) then
    return redis.call('HGET', P .. ':j:' .. id, 'g') or '0'
  end
  if fids then
    local g = fids[id]
    if g == nil then
      g = redis.call('HGET', P .. ':fid', id) or false
      fids[id] = g
    end
    if g then return g end
  end
  return natural_group(id)
end
local function jkey(id, g)
  if not CLUSTER and is_new(id) then return P .. ':j:' .. id end
  return P .. ':{' .. (g or gof(id)) .. '}:j:' .. id
end
local function qpre(g, q) return P .. ':{' .. g .. '}:q' .. #q .. ':' .. q .. ':' end
local function wchan(g, q) return P .. ':{' .. g .. '}:w:' .. #q .. ':' .. q end
local function num(s) return tonumber(s) or 0 end
local function plain(id) return string.format('%d', tonumber(id)) end

-- Values that never repeat. ------------------------------------------------

-- Job IDs (P:seq) and claim tokens (P:{g}:tok, per group) come from
-- counters that hold the last value handed out. Redis may lose the last
-- writes it acknowledged (a power cut under appendfsync everysec, a
-- restart from an older snapshot, a failover to a replica that lagged),
-- and a counter rolled back that way must not hand out its lost values a
-- second time. So every value is at least the last one plus one, and at
-- least the server's clock in microseconds (TIME); and a value handed out
-- from a counter that this library's state may not have written last is
-- at least the clock plus JUMP (a jump): the first after the state
-- started (a server start, FUNCTION LOAD), the first on a replica promoted
-- (its state never wrote the counter), the first after the counter
-- changed under the state (a server that was a primary before, promoted
-- again after it replicated part of another primary's values), and the
-- first after the server's replication ID changed (the same, when it
-- replicated none of them). The ID is read when a jump is due anyway and
-- when the counter was not written for RECHECK, as an uncoordinated
-- failover and a return take longer; a server whose ID cannot be read
-- jumps then. A rolled-back counter thus starts again above every value
-- handed out before, as long as the new server's clock is behind the old
-- one's by less than JUMP minus the old counter's lead on its clock: up to
-- JUMP, shrinking to none, over the JUMP after a jump; n µs after a batch
-- of n values otherwise. A jump raises a counter to the clock plus JUMP,
-- not by JUMP, so values stay below 2^53 (exact in a double, and in
-- JavaScript) until the year 2255.
local function clock_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- new_values hands out n values of counter key and returns the first:
-- first .. first + n - 1 are the caller's. last, when the counter is
-- missing, is where it starts (values above it); with read, last is the
-- counter's value, which the caller read.
local new_values
do
  local JUMP = 10000000
  local RECHECK = 1000000
  -- Per counter, what this library's state knows of it: last_out, the
  -- last value it wrote; out_at, when (the clock in µs); replid_at, the
  -- server's replication ID when it last read it for the counter.
  -- Library-level tables, which Redis keeps between calls and starts
  -- empty when it loads the library.
  local last_out, out_at, replid_at = {}, {}, {}

  -- replid returns the server's replication ID, or false when the server
  -- does not let the library read it.
  local function replid()
    local info = redis.pcall('INFO', 'replication')
    return type(info) == 'string' and string.match(info, 'master_replid:(%w+)') or false
  end

  function new_values(key, n, last, read)
    if not read then
      local v = redis.call('GET', key)
      if v then last = tonumber(v) end
    end
    local clock = clock_us()
    local mine = last_out[key]
    local jump = not mine or mine ~= last
    if jump or clock - out_at[key] > RECHECK then
      local id = replid()
      if not id or id ~= replid_at[key] then jump = true end
      replid_at[key] = id
    end
    local first = math.max((last or 0) + 1, jump and clock + JUMP or clock)
    local final = first + n - 1
    redis.call('SET', key, string.format('%d', final))
    last_out[key], out_at[key] = final, clock
    return first
  end
end

-- new_ids hands out n job IDs and returns the first. P:seq held a
-- sequence number before library version 8 (IDs seq*16384 + g): a value
-- below NEW_ID is such a number, and the IDs handed out come after the
-- last ID it gave.
local function new_ids(n)
  local key = P .. ':seq'
  local v = num(redis.call('GET', key))
  if v > 0 and v < NEW_ID then v = v * GROUPS + GROUPS - 1 end
  return new_values(key, n, v, true)
end

-- load_job returns the job fields the functions work with, or nil.
-- Fields of the hash: q queue, k kind, st state, p priority, a attempt
-- (of a running job: the attempts before the current one, which the claim
-- leaves alone to save a write; load_job and the reader add 1),
-- ma max attempts, ra RunAt, ca CreatedAt, ata AttemptedAt, atb
-- AttemptedBy, fa FinalizedAt, lu LeaseUntil, tok claim token, u unique
-- key, pk partition key, e errors (JSON lines), args, x (tags, meta,
-- timeout: opaque here), res result, hr has result, pr progress, cr cancel
-- requested, wf workflow ID, d dependency IDs (comma-separated), idf
-- ignore dependency failure, wn dependencies still holding the job back,
-- cby the dependency whose ending cancelled the job, hd set once a job
-- waited for this one (so settle has dependents to look at), g the
-- queue's group (a job with a new ID on one server, see is_new), ft the
-- claim token and state of the last outcome applied ('token:state', see
-- sortie_finish), par the parent (the job whose spawn step enqueued
-- this one), ss that spawn step's name, cwp cancel with parent, wt the
-- step the job waits at (a sleep while scheduled, a spawn while waiting;
-- shown only in those states). An empty
-- value is the same as no field. To save memory a new job's hash leaves
-- out p when 2, a when 0, ma when 25 and ca when equal to ra; whatever
-- changes ra writes ca first (keep_created).
local function load_job(id, g)
  local own = not CLUSTER and is_new(id)
  if not own then g = g or gof(id) end
  local k = jkey(id, g)
  local v = redis.call('HMGET', k, 'q', 'k', 'st', 'p', 'a', 'ma', 'ra', 'pk', 'u', 'tok', 'cr', 'd', 'idf', 'wn', 'cby', 'hd', 'ca', 'g',
    'par', 'ss', 'cwp', 'wt', 'fa')
  if not v[3] then return nil end
  if own then g = v[18] or '0' end
  local a = num(v[5])
  if v[3] == 'running' then a = a + 1 end
  return {
    id = id, key = k, g = g, q = v[1], k = v[2], st = v[3], p = v[4] or '2', a = a, ma = tonumber(v[6] or '25'),
    ca = v[17],
    ra = v[7], pk = v[8] or '', u = v[9] or '', tok = v[10] or '', cr = v[11] == '1', d = v[12] or '',
    idf = v[13] == '1', wn = num(v[14]), cby = v[15] or '', hd = v[16] == '1', qp = qpre(g, v[1]),
    par = v[19] or '', ss = v[20] or '', cwp = v[21] == '1', wt = v[22] or '', fa = v[23] or '',
  }
end

-- keep_created returns the fields that keep j's CreatedAt when its RunAt
-- is about to change: ca, when the hash left it out as equal to ra.
local function keep_created(j, f)
  if not j.ca then
    f[#f + 1] = 'ca'
    f[#f + 1] = j.ra
    j.ca = j.ra
  end
  return f
end

local function deps_of(j)
  local out = {}
  for s in string.gmatch(j.d, '[^,]+') do out[#out + 1] = s end
  return out
end

-- error_line encodes one attempt error as a JSON line; at is a time
-- argument (18 digits), kept as a string.
local function error_line(attempt, at, msg, stack)
  local line = '{"a":' .. tostring(attempt) .. ',"t":"' .. at .. '","m":' .. cjson.encode(msg)
  if stack and stack ~= '' then line = line .. ',"s":' .. cjson.encode(stack) end
  return line .. '}'
end

local function with_error(j, line)
  local old = redis.call('HGET', j.key, 'e')
  if old and old ~= '' then return old .. '\n' .. line end
  return line
end

-- Deferred writes. --------------------------------------------------------

-- The sorted sets of states (x:, s, r, f:) take many members per call: a
-- function defers its adds and removals there and flush sends them as few
-- commands as the order allows (per key, runs of the same command, in the
-- order they were made; keys are independent). A function flushes before
-- it reads one of those sets, and the library flushes when it returns.
local pend, pend_keys = {}, {}
local function defer(cmd, key, a, b)
  local runs = pend[key]
  if not runs then
    runs = {}
    pend[key] = runs
    pend_keys[#pend_keys + 1] = key
  end
  local last = runs[#runs]
  if not last or last.cmd ~= cmd then
    last = { cmd = cmd, args = {} }
    runs[#runs + 1] = last
  end
  local args = last.args
  args[#args + 1] = a
  if b then args[#args + 1] = b end
end

-- ordered reports whether list a is in order (each at least the one
-- before; strictly, each after it, with strict).
local function ordered(a, strict)
  for i = 2, #a do
    if a[i] < a[i - 1] or (strict and a[i] == a[i - 1]) then return false end
  end
  return true
end

-- in_order sorts list a in place unless it is in order already, as a
-- call's IDs and members mostly are (sorting strings in Lua costs a
-- string comparison, a C call, per step).
local function in_order(a)
  if not ordered(a) then table.sort(a) end
  return a
end

local function send_chunked(cmd, key, args)
  local i = 1
  while i <= #args do
    local j = math.min(i + CHUNK - 1, #args)
    redis.call(cmd, key, unpack(args, i, j))
    i = j + 1
  end
end

-- Lanes. ------------------------------------------------------------------

-- A lane holds the available jobs of one priority, kind and partition key
-- (laneid) in claim order: a member is priority (1 digit), RunAt (18) and
-- ID (16), so member order is claim order. Most jobs arrive in that order
-- (enqueued to run now, IDs and clocks rising): those are appended to the
-- lane's list, QP L:<laneid>, about 40 bytes a job; a job that arrives
-- before the list's last (a scheduled job come due, a retry, a producer
-- whose clock is behind another's) goes to the lane's sorted set,
-- QP l:<laneid> (where library versions before 13 kept every job of the
-- lane). A claim takes from the fronts of both, in member order.
-- A job leaving the lane otherwise (cancelled, deleted) is removed from
-- the sorted set, or popped when it is at an end of the list; else its
-- list member stays behind, stale, and the claim that reaches it drops
-- it (see take): removing it from the middle of a long list would cost
-- the server a walk of the list.
local function laneid(j) return j.p .. j.k .. '\0' .. j.pk end

-- lane_head returns the first member of the lane whose list and sorted
-- set are lk and zk, nil when it is empty. front, when given, is the
-- list's first member as just read (false: the list is empty); zempty
-- says the sorted set is known to be empty.
local function lane_head(lk, zk, front, zempty)
  local a = front
  if a == nil then a = redis.call('LINDEX', lk, 0) end
  local b = nil
  if not zempty then b = redis.call('ZRANGE', zk, 0, 0)[1] end
  if a and (not b or a < b) then return a end
  return b or nil
end

-- lane_live returns the fields st, ra, ca of the job of member m of lane
-- lid of a queue of group g when m is live (its job is available, with
-- that RunAt, in that lane), nil when m is stale. key, when given, is the
-- job's key.
local function lane_live(m, g, lid, key)
  local v = redis.call('HMGET', key or jkey(string.sub(m, 20), g), 'st', 'ra', 'ca', 'p', 'k', 'pk')
  if v[1] ~= 'available' or v[2] ~= string.sub(m, 2, 19) then return nil end
  if (v[4] or '2') .. v[5] .. '\0' .. (v[6] or '') ~= lid then return nil end
  return v
end

-- LANE_CLEAN is the most stale members lane_clean drops at a time.
local LANE_CLEAN = {{LANE_CLEAN}}

-- lane_clean drops the stale members at the front of lane lid's list lk
-- (of a queue of group g), up to LANE_CLEAN, so that the lane's head
-- names a live job (QueueLatency reads the heads) unless more than that
-- lie in a row, which the next claim drops. It returns how many it
-- dropped, and the list's first member when it stopped at a live one or
-- at the end (false: the list is empty), for lane_head.
local function lane_clean(lk, g, lid)
  for i = 1, LANE_CLEAN do
    local m = redis.call('LINDEX', lk, 0)
    if not m then return i - 1, false end
    if lane_live(m, g, lid) then return i - 1, m end
    redis.call('LPOP', lk)
  end
  return LANE_CLEAN, nil
end

-- Lane pushes are deferred, per lane, so that a batch adds its jobs to a
-- lane in one command and moves the lane's head once.
local lane_adds, lane_order = {}, {}

local function flush_lanes()
  for _, l in ipairs(lane_order) do
    local ms = in_order(lane_adds[l.key])
    local lk, zk = l.qp .. 'L:' .. l.lid, l.qp .. 'l:' .. l.lid
    local tail = redis.call('LINDEX', lk, -1)
    local late, after = {}, {}
    for _, m in ipairs(ms) do
      if tail and m < tail then
        late[#late + 1] = 0
        late[#late + 1] = m
      else
        after[#after + 1] = m
      end
    end
    -- Members all after the list's last leave the lane's head as it is
    -- (the list's first is at most its last); else the head is read
    -- before they are added.
    local moves, head = not tail or #late > 0, nil
    if moves then
      local front = nil
      if not tail then front = false end
      head = lane_head(lk, zk, front)
    end
    if #late > 0 then send_chunked('ZADD', zk, late) end
    if #after > 0 then send_chunked('RPUSH', lk, after) end
    local best = ms[1]
    if not moves then
      -- the head stays
    elseif not head then
      redis.call('ZADD', l.h, 0, best .. l.lid)
    elseif best < head then
      redis.call('ZREM', l.h, head .. l.lid)
      redis.call('ZADD', l.h, 0, best .. l.lid)
    end
  end
  lane_adds, lane_order = {}, {}
end

-- Finished sets. ----------------------------------------------------------

-- A queue's finished jobs of each finished state wait for pruning in the
-- order they finished. Most finish in that order (the callers' clocks
-- rise): those are appended to the list QP F:<state>, member FinalizedAt
-- (18 digits) and ID (16), about 40 bytes a job; a job that finishes
-- before the list's last (a caller whose clock is behind another's, a
-- child its parent's deletion releases, an import) goes to the sorted set
-- QP f:<state> by FinalizedAt (where library versions before 13 kept
-- them all). A job leaving its finished state (retried, deleted) is
-- removed from the sorted set, or popped when it is at an end of the
-- list; else its list member stays behind, stale, until pruning reaches
-- it and drops it (see sortie_prune).
local fin_adds, fin_order = {}, {}

-- fin_push defers adding job id, finished at at, to the finished set of
-- state st of the queue whose keys start with qp.
local function fin_push(qp, st, at, id)
  local key = qp .. 'F:' .. st
  local a = fin_adds[key]
  if not a then
    a = {}
    fin_adds[key] = a
    fin_order[#fin_order + 1] = { key = key, z = qp .. 'f:' .. st }
  end
  a[#a + 1] = at .. id
end

local function flush_fins()
  for _, f in ipairs(fin_order) do
    local ms = in_order(fin_adds[f.key])
    local tail = redis.call('LINDEX', f.key, -1)
    local late, after = {}, {}
    for _, m in ipairs(ms) do
      if tail and m < tail then
        late[#late + 1] = string.sub(m, 1, 18)
        late[#late + 1] = string.sub(m, 19)
      else
        after[#after + 1] = m
      end
    end
    if #late > 0 then send_chunked('ZADD', f.z, late) end
    if #after > 0 then send_chunked('RPUSH', f.key, after) end
  end
  fin_adds, fin_order = {}, {}
end

-- fin_remove takes job id, finished at fa, out of the finished set of
-- state st of the queue whose keys start with qp.
local function fin_remove(qp, st, fa, id)
  if #fin_order > 0 then flush_fins() end
  if redis.call('ZREM', qp .. 'f:' .. st, id) == 1 then return end
  local key, m = qp .. 'F:' .. st, fa .. id
  if redis.call('LINDEX', key, 0) == m then
    redis.call('LPOP', key)
  elseif redis.call('LINDEX', key, -1) == m then
    redis.call('RPOP', key)
  end
end

-- ID indexes. -------------------------------------------------------------

-- A queue's jobs in each state but running are listed, in ID order, by
-- the state's ID index QP i:<state>: a zset of buckets (member and score:
-- a bucket's start, an ID), each bucket QP i:<state>:<start> a zset of at
-- most BUCKET IDs (member and score: the ID), none below its start and
-- none at or past the next bucket's. A zset that small is one listpack, so
-- an ID costs about 30 bytes of memory where a member of one big zset (a
-- skiplist node and a dictionary entry) costs 120; a ZADD walks the
-- listpack, once to look for the member and once for its place, so a
-- bucket is kept small. A bucket an earlier version filled past BUCKET
-- (library versions 13 and 14 kept 100) takes no more IDs: those go to a
-- bucket after it or, in its range, split it (bucket_merge). The state's
-- count is kept beside the index, in QP n (state -> count), written once
-- a call from what the index commands report they added or removed. Library
-- versions before 13 kept one zset QP x:<state>; sortie_index_migrate
-- moves it into the index, and readers count and list both until then.
local index_add, index_remove, index_range
do
  local BUCKET = 32

  -- bucket_at returns the start of the bucket of index key that id belongs
  -- in (the last start at or before id), nil when id is below every start.
  local function bucket_at(key, id)
    return redis.call('ZRANGE', key, id, '-inf', 'BYSCORE', 'REV', 'LIMIT', 0, 1)[1]
  end

  -- bucket_after returns the first start of index key after start (the
  -- first start of all when start is nil), nil when there is none.
  local function bucket_after(key, start)
    if not start then return redis.call('ZRANGE', key, 0, 0)[1] end
    return redis.call('ZRANGE', key, '(' .. start, '+inf', 'BYSCORE', 'LIMIT', 0, 1)[1]
  end

  -- bucket_add adds ids[i..j] to bucket bk and returns how many were new.
  local function bucket_add(bk, ids, i, j)
    local added = 0
    while i <= j do
      local e = math.min(i + CHUNK / 2 - 1, j)
      local args = {}
      for k = i, e do
        args[#args + 1] = ids[k]
        args[#args + 1] = ids[k]
      end
      added = added + redis.call('ZADD', bk, unpack(args))
      i = e + 1
    end
    return added
  end

  -- new_buckets puts sorted ids[i..j], none of them indexed, into new
  -- buckets of index key, BUCKET a bucket.
  local function new_buckets(key, ids, i, j)
    while i <= j do
      local e = math.min(i + BUCKET - 1, j)
      bucket_add(key .. ':' .. ids[i], ids, i, e)
      redis.call('ZADD', key, ids[i], ids[i])
      i = e + 1
    end
  end

  -- bucket_merge adds sorted ids[i..j] to the full bucket of index key at
  -- start b: the bucket's IDs and theirs are written again as new buckets.
  -- It returns how many were new.
  local function bucket_merge(key, b, ids, i, j)
    local bk = key .. ':' .. b
    local old = redis.call('ZRANGE', bk, 0, -1)
    local all, seen = {}, {}
    for _, id in ipairs(old) do all[#all + 1] = id; seen[id] = true end
    for k = i, j do
      if not seen[ids[k]] then all[#all + 1] = ids[k]; seen[ids[k]] = true end
    end
    table.sort(all)
    redis.call('DEL', bk)
    redis.call('ZREM', key, b)
    new_buckets(key, all, 1, #all)
    return #all - #old
  end

  -- sorted returns ids in order, each once.
  local function sorted(ids)
    if ordered(ids, true) then return ids end
    table.sort(ids)
    local out = {}
    for _, id in ipairs(ids) do
      if id ~= out[#out] then out[#out + 1] = id end
    end
    return out
  end

  -- run_end returns the last index of the run of sorted ids from i that
  -- go in one bucket: those below nb, the next bucket's start (all with
  -- nb nil).
  local function run_end(ids, i, nb)
    local j = i
    while j < #ids and (not nb or ids[j + 1] < nb) do j = j + 1 end
    return j
  end

  -- index_add adds ids to index key and returns how many were new.
  function index_add(key, ids)
    ids = sorted(ids)
    local added, i, n = 0, 1, #ids
    -- last is the last bucket's start (nil: no bucket), read again only
    -- when a step that added buckets leaves IDs to add (moved).
    local last = redis.call('ZRANGE', key, -1, -1)[1]
    local moved = false
    while i <= n do
      if moved then last, moved = redis.call('ZRANGE', key, -1, -1)[1], false end
      local b, nb = last, nil
      -- With no bucket at all there is none to look for.
      if last and ids[i] < last then
        b = bucket_at(key, ids[i])
        nb = bucket_after(key, b)
      end
      local j = run_end(ids, i, nb)
      local m = j - i + 1
      if not b then
        -- Below every bucket: into the first, started again at ids[i],
        -- when it has room; else buckets of their own.
        local fk = nb and key .. ':' .. nb
        if fk and redis.call('ZCARD', fk) + m <= BUCKET then
          added = added + bucket_add(fk, ids, i, j)
          redis.call('RENAME', fk, key .. ':' .. ids[i])
          redis.call('ZREM', key, nb)
          redis.call('ZADD', key, ids[i], ids[i])
        else
          new_buckets(key, ids, i, j)
          added = added + m
        end
        moved = true
      else
        local bk = key .. ':' .. b
        local c = redis.call('ZCARD', bk)
        if c + m <= BUCKET then
          added = added + bucket_add(bk, ids, i, j)
        elseif c == 0 or ids[i] > redis.call('ZRANGE', bk, -1, -1)[1] then
          -- After the bucket's last ID: fill it, then new buckets.
          local room = math.max(BUCKET - c, 0)
          if room > 0 then bucket_add(bk, ids, i, i + room - 1) end
          new_buckets(key, ids, i + room, j)
          added = added + m
          moved = true
        else
          added = added + bucket_merge(key, b, ids, i, j)
          moved = true
        end
      end
      i = j + 1
    end
    return added
  end

  -- index_remove removes ids from index key and returns how many it held.
  function index_remove(key, ids)
    ids = sorted(ids)
    local removed, i, n = 0, 1, #ids
    while i <= n do
      local b = bucket_at(key, ids[i])
      -- The next bucket's start bounds the run; a last ID is a run alone.
      local nb = nil
      if i < n then nb = bucket_after(key, b) end
      local j = run_end(ids, i, nb)
      if b then
        local bk = key .. ':' .. b
        local k = i
        while k <= j do
          local e = math.min(k + CHUNK - 1, j)
          removed = removed + redis.call('ZREM', bk, unpack(ids, k, e))
          k = e + 1
        end
        -- Redis deletes a zset it emptied.
        if redis.call('EXISTS', bk) == 0 then redis.call('ZREM', key, b) end
      end
      i = j + 1
    end
    return removed
  end

  -- index_range returns up to n IDs of index key after cursor (an ID, '0'
  -- for none) in order, or before it from the last down with desc.
  function index_range(key, cursor, desc, n)
    local out = {}
    local lo, hi, from = '(' .. cursor, '+inf', nil
    if desc then
      lo, hi = '-inf', '+inf'
      if tonumber(cursor) ~= 0 then hi = '(' .. cursor end
    else
      -- The bucket cursor is in may hold IDs after it.
      from = bucket_at(key, cursor)
    end
    local off = 0
    while #out < n do
      local bs
      if desc then
        bs = redis.call('ZRANGE', key, hi, '-inf', 'BYSCORE', 'REV', 'LIMIT', off, 16)
      else
        bs = redis.call('ZRANGE', key, '(' .. cursor, '+inf', 'BYSCORE', 'LIMIT', off, 16)
        if from then table.insert(bs, 1, from); from = nil; off = off - 1 end
      end
      if #bs == 0 then break end
      off = off + #bs
      for _, b in ipairs(bs) do
        local ids
        if desc then
          ids = redis.call('ZRANGE', key .. ':' .. b, hi, lo, 'BYSCORE', 'REV', 'LIMIT', 0, n - #out)
        else
          ids = redis.call('ZRANGE', key .. ':' .. b, lo, hi, 'BYSCORE', 'LIMIT', 0, n - #out)
        end
        for _, id in ipairs(ids) do out[#out + 1] = id end
        if #out >= n then break end
      end
    end
    return out
  end
end

-- state_count returns how many jobs of the queue whose keys start with qp
-- are in state st (not running), counting an index of an earlier version
-- not yet moved (see sortie_index_migrate).
local function state_count(qp, st)
  return num(redis.call('HGET', qp .. 'n', st)) + redis.call('ZCARD', qp .. 'x:' .. st)
end

-- index_meta holds, per index key deferred to, its queue's prefix and
-- state: where its count is.
local index_meta = {}

-- index_defer defers adding job id to (cmd 'IADD') or removing it from
-- ('IREM') the ID index of state st of the queue whose keys start with
-- qp; flush applies them.
-- key, when given, is the index's key (a caller deferring many saves
-- building it each time). Until sortie_index_migrate has moved the
-- state's index of an earlier version (QP x:<state>), a removal removes
-- from it too.
local function index_defer(cmd, qp, st, id, key)
  key = key or qp .. 'i:' .. st
  local meta = index_meta[key]
  if not meta then
    meta = { qp = qp, st = st }
    index_meta[key] = meta
  end
  defer(cmd, key, id)
  if cmd == 'IREM' then
    if meta.old == nil then meta.old = redis.call('EXISTS', qp .. 'x:' .. st) == 1 end
    if meta.old then defer('ZREM', qp .. 'x:' .. st, id) end
  end
end

local function flush()
  if #lane_order > 0 then flush_lanes() end
  if #fin_order > 0 then flush_fins() end
  if #pend_keys == 0 then return end
  for _, key in ipairs(pend_keys) do
    local meta, delta = index_meta[key], 0
    for _, run in ipairs(pend[key]) do
      if run.cmd == 'IADD' then
        delta = delta + index_add(key, run.args)
      elseif run.cmd == 'IREM' then
        delta = delta - index_remove(key, run.args)
      else
        send_chunked(run.cmd, key, run.args)
      end
    end
    if meta and delta ~= 0 then redis.call('HINCRBY', meta.qp .. 'n', meta.st, delta) end
  end
  pend, pend_keys, index_meta = {}, {}, {}
end

-- History. ----------------------------------------------------------------

-- The history counts (QP hc, QP hm) of a call are added up as it runs and
-- written when it returns, one HINCRBY per queue, minute and outcome it
-- touched and one ZADD per queue and minute, so a batch costs the same
-- few writes however many jobs it moved.
local OUTCOMES = { 'completed', 'cancelled', 'dead', 'retried' }
local hist, hist_order = {}, {}

-- minute_of returns the start of the minute of time argument t
-- (store.HistoryMinute), 18 digits.
local function minute_of(t)
  local n = tonumber(t)
  return tpad(n - math.fmod(n, 60000000))
end

-- count counts one job of the queue whose keys start with qp reaching
-- outcome at now.
-- fields memoizes count's hash fields: time -> outcome -> field, for the
-- few times one call passes (usually its now).
local fields = {}
local fields_n = 0

-- n, when given, is how many jobs reached it (1 when not).
local function count(qp, now, outcome, n)
  local h = hist[qp]
  if not h then
    h = { fields = {}, order = {} }
    hist[qp] = h
    hist_order[#hist_order + 1] = qp
  end
  local byo = fields[now]
  if not byo then
    if fields_n >= 16 then fields, fields_n = {}, 0 end
    byo = {}
    fields[now] = byo
    fields_n = fields_n + 1
  end
  local f = byo[outcome]
  if not f then
    f = minute_of(now) .. ':' .. outcome
    byo[outcome] = f
  end
  if not h.fields[f] then
    h.fields[f] = 0
    h.order[#h.order + 1] = f
  end
  h.fields[f] = h.fields[f] + (n or 1)
end

local function flush_history()
  if #hist_order == 0 then return end
  for _, qp in ipairs(hist_order) do
    local h = hist[qp]
    local last = nil
    for _, f in ipairs(h.order) do
      redis.call('HINCRBY', qp .. 'hc', f, h.fields[f])
      local m = string.sub(f, 1, 18)
      if m ~= last then
        redis.call('ZADD', qp .. 'hm', tonumber(m), m)
        last = m
      end
    end
  end
  hist, hist_order = {}, {}
end

local function lane_push(j)
  local lid = laneid(j)
  local l = j.qp .. 'l:' .. lid
  local a = lane_adds[l]
  if not a then
    a = {}
    lane_adds[l] = a
    lane_order[#lane_order + 1] = { key = l, qp = j.qp, h = j.qp .. 'h', lid = lid }
  end
  a[#a + 1] = j.p .. j.ra .. j.id
end

local function lane_remove(j)
  if #lane_order > 0 then flush_lanes() end
  local lid = laneid(j)
  local lk, zk = j.qp .. 'L:' .. lid, j.qp .. 'l:' .. lid
  local m = j.p .. j.ra .. j.id
  local head = lane_head(lk, zk)
  if redis.call('ZREM', zk, m) == 0 then
    if redis.call('LINDEX', lk, 0) == m then
      redis.call('LPOP', lk)
    elseif redis.call('LINDEX', lk, -1) == m then
      redis.call('RPOP', lk)
    end
  end
  if head == m then
    redis.call('ZREM', j.qp .. 'h', m .. lid)
    local _, front = lane_clean(lk, j.g, lid)
    local nh = lane_head(lk, zk, front)
    if nh then redis.call('ZADD', j.qp .. 'h', 0, nh .. lid) end
  end
end

-- Steps. ------------------------------------------------------------------

-- A job's durable steps are in three hashes beside its own (see the
-- header). A step's meta (P:{g}:j:<id>:sm) is seven values,
-- comma-separated, none empty: its place in the job's order (1, 2, ...),
-- kind (step, sleep, spawn), the attempt that recorded it, when (a time
-- argument), the wake time of a sleep ('0' for others), the size of a
-- step's result or how many children a spawn enqueued ('0' for a sleep),
-- and how many of a spawn's children are pending ('0' for others).
local function step_meta(key, name)
  local m = redis.call('HGET', key .. ':sm', name)
  if not m then return nil end
  local v = {}
  for x in string.gmatch(m, '[^,]+') do v[#v + 1] = x end
  return { idx = v[1], kind = v[2], a = v[3], at = v[4], un = v[5], n = v[6], pending = tonumber(v[7]) }
end

local function step_encode(s)
  return table.concat({ s.idx, s.kind, s.a, s.at, s.un, s.n, s.pending }, ',')
end

-- step_add records step s (without idx) of job key under name, after its
-- other steps; it returns false when the job has a step of that name.
local function step_add(key, name, s)
  s.idx = redis.call('HLEN', key .. ':sm') + 1
  return redis.call('HSETNX', key .. ':sm', name, step_encode(s)) == 1
end

-- held reports whether finished job j stays out of its queue's finished
-- set (QP f:, what pruning reads): its parent is still stored, so the
-- parent's Await can read its outcome.
local function held(j)
  return j.par ~= '' and redis.call('EXISTS', jkey(j.par)) == 1
end

-- States. -----------------------------------------------------------------

-- leave takes j out of the structures of its current state.
local function leave(j)
  local st = j.st
  if st ~= 'running' then index_defer('IREM', j.qp, st, j.id) end
  if st == 'available' then
    lane_remove(j)
  elseif st == 'scheduled' or st == 'retrying' then
    defer('ZREM', j.qp .. 's', j.id)
  elseif st == 'running' then
    defer('ZREM', j.qp .. 'r', j.id)
    if j.pk ~= '' then redis.call('HINCRBY', j.qp .. 'prun', j.pk, -1) end
  elseif FINISHED[st] then
    fin_remove(j.qp, st, j.fa, j.id)
  end
end

-- enter puts j into state st (not running: only a claim does that): the
-- caller set j.ra for available, scheduled and retrying, and passes now
-- for finished states. fields, when given, are more field, value pairs
-- of the job hash to set in the same HSET.
local function enter(j, st, now, fields)
  j.st = st
  local f = fields or {}
  f[#f + 1] = 'st'
  f[#f + 1] = st
  if FINISHED[st] then
    f[#f + 1] = 'fa'
    f[#f + 1] = now
    j.fa = now
    count(j.qp, now, st)
  end
  redis.call('HSET', j.key, unpack(f))
  index_defer('IADD', j.qp, st, j.id)
  if st == 'available' then
    lane_push(j)
  elseif st == 'scheduled' or st == 'retrying' then
    defer('ZADD', j.qp .. 's', j.ra, j.id)
  elseif FINISHED[st] and not held(j) then
    fin_push(j.qp, st, now, j.id)
  end
end

local function hold_key(j)
  if j.u ~= '' then redis.call('HSET', ukey(j.g), j.u, j.id) end
end

local function release_key(j)
  if j.u ~= '' and redis.call('HGET', ukey(j.g), j.u) == j.id then
    redis.call('HDEL', ukey(j.g), j.u)
  end
end

-- waits holds the waiting claims' functions (see the waiting claims).
local waits = {}

-- Notifications, sent when the function returns: a queue's watch channel
-- once, and each group's done channel once with the IDs, comma-separated.
-- notes maps each channel to its queue's group, name and now (see note).
local notes = {}
-- note notes queue q of group g: its watch channel hears of it, and its
-- waiters (see the waiting claims) get jobs claimed at now, or, with no
-- now, a wake-up.
local function note(g, q, now)
  local ch = wchan(g, q)
  local n = notes[ch]
  if not n then
    notes[ch] = { g, q, now }
  elseif now and (not n[3] or now > n[3]) then
    n[3] = now
  end
end
local function note_queue(j, now) note(j.g, j.q, now) end
-- dones holds per group the IDs of its jobs that finished in the call,
-- done_order the groups in order.
local dones, done_order = {}, {}
local function done_id(g, id)
  local l = dones[g]
  if not l then
    l = {}
    dones[g] = l
    done_order[#done_order + 1] = g
  end
  l[#l + 1] = id
end
local function done(j) done_id(j.g, j.id) end
local function send_notes()
  if next(notes) == nil and #done_order == 0 then return end
  for ch in pairs(notes) do redis.call('SPUBLISH', ch, '') end
  for _, g in ipairs(done_order) do redis.call('SPUBLISH', P .. ':{' .. g .. '}:done', table.concat(dones[g], ',')) end
  notes, dones, done_order = {}, {}, {}
end

-- ready makes waiting (or revived) j available, or scheduled when its
-- RunAt is after now.
local function ready(j, now)
  if j.ra > now then enter(j, 'scheduled') else enter(j, 'available') end
  note_queue(j, now)
end

-- child_moved records that child j (of a parent: j.par) entered (d = 1)
-- or left (d = -1) the pending states in its parent's spawn step, and
-- makes the parent available when that leaves none of the step's
-- children pending while the parent waits at it (an Await).
local function child_moved(j, d, now)
  if j.par == '' then return end
  local pk = jkey(j.par)
  local s = step_meta(pk, j.ss)
  if not s then return end
  s.pending = s.pending + d
  redis.call('HSET', pk .. ':sm', j.ss, step_encode(s))
  if d > 0 or s.pending > 0 then return end
  local p = load_job(j.par)
  if p and p.st == 'waiting' and p.wt == j.ss then
    leave(p)
    redis.call('HDEL', p.key, 'wt')
    enter(p, 'available')
    note_queue(p, now)
  end
end

-- wait_for links j, about to wait, to the dependencies holding it back and
-- returns how many do; a dependency that no longer exists does not.
local function wait_for(j)
  local n = 0
  for _, d in ipairs(deps_of(j)) do
    local dk = jkey(d)
    local st = redis.call('HGET', dk, 'st')
    if st and (PENDING[st] or (FINISHED[st] and st ~= 'completed' and not j.idf)) then
      redis.call('SADD', dk .. ':dn', j.id)
      redis.call('HSET', dk, 'hd', '1')
      n = n + 1
    end
  end
  redis.call('HSET', j.key, 'wn', n)
  j.wn = n
  return n
end

local function cancelled_by(j, d)
  redis.call('HSET', j.key, 'cby', d)
  redis.call('SADD', jkey(d) .. ':cc', j.id)
end

-- finalize ends pending j in finished state st at now: leaves its state,
-- releases its unique key, clears its lease and cancel request. fields
-- are more to set.
local function finalize(j, st, now, fields)
  leave(j)
  release_key(j)
  local f = fields or {}
  f[#f + 1] = 'lu'; f[#f + 1] = ''; f[#f + 1] = 'cr'; f[#f + 1] = ''
  enter(j, st, now, f)
  done(j)
  child_moved(j, -1, now)
end

-- settle handles the waiting dependents of job id, which ended in state st
-- ('deleted' when it was deleted or pruned), if it has any (hd): a
-- completed dependency (or a failed one the dependent ignores) counts down
-- the dependent's wn and releases it at zero; a failed one cancels it and
-- goes on down the graph, visiting each job at most once per ending.
local function settle(id, st, now, hd)
  if not hd then return end
  local stack = { { id, st } }
  while #stack > 0 do
    local e = table.remove(stack)
    local dk = jkey(e[1])
    local ids = redis.call('SMEMBERS', dk .. ':dn')
    redis.call('DEL', dk .. ':dn')
    redis.call('HDEL', dk, 'hd')
    for _, s in ipairs(ids) do
      local w = load_job(s)
      if w and w.st == 'waiting' then
        if e[2] == 'completed' or w.idf then
          w.wn = w.wn - 1
          redis.call('HSET', w.key, 'wn', w.wn)
          if w.wn <= 0 then
            leave(w)
            ready(w, now)
          end
        else
          local msg
          if e[2] == 'deleted' then
            msg = string.format(MSG_DEP_DELETED, plain(e[1]))
          else
            msg = string.format(MSG_DEP_ENDED, plain(e[1]), e[2])
          end
          finalize(w, 'cancelled', now, { 'e', with_error(w, error_line(w.a, now, msg)) })
          if e[2] ~= 'deleted' then cancelled_by(w, e[1]) end
          if w.hd then stack[#stack + 1] = { w.id, 'cancelled' } end
        end
      end
    end
  end
end

local function row(j)
  return redis.call('HGETALL', j.key)
end

-- Queues. -----------------------------------------------------------------

local function queue_cfg(qp)
  local v = redis.call('HMGET', qp .. 'cfg', 'mr', 'rl', 'rp', 'pmr', 'prl', 'prp', 'md', 'ov', 'paused')
  return {
    mr = num(v[1]), rl = num(v[2]), rp = num(v[3]), pmr = num(v[4]), prl = num(v[5]), prp = num(v[6]),
    md = num(v[7]), ov = num(v[8]), paused = v[9] == '1',
  }
end

local function queued_count(qp)
  local n = 0
  for _, st in ipairs(QUEUED_STATES) do n = n + state_count(qp, st) end
  return n
end

-- drop_oldest cancels the n lowest-ID queued jobs of a queue.
local function drop_oldest(g, q, qp, n, md, now)
  local cand = {}
  for _, st in ipairs(QUEUED_STATES) do
    for _, s in ipairs(index_range(qp .. 'i:' .. st, '0', false, n)) do cand[#cand + 1] = s end
    for _, s in ipairs(redis.call('ZRANGE', qp .. 'x:' .. st, 0, n - 1)) do cand[#cand + 1] = s end
  end
  -- An index of an earlier version not yet moved may list a job twice,
  -- or in a state it has left.
  table.sort(cand)
  local msg = string.format(MSG_DROPPED, q, md)
  local dropped = 0
  for i = 1, #cand do
    if dropped >= n then break end
    local j = cand[i] ~= cand[i - 1] and load_job(cand[i], g)
    if j and PENDING[j.st] and j.st ~= 'running' then
      finalize(j, 'cancelled', now, { 'e', with_error(j, error_line(j.a, now, msg)) })
      redis.call('HINCRBY', qp .. 'cfg', 'dropped', 1)
      settle(j.id, 'cancelled', now, j.hd)
      dropped = dropped + 1
    end
  end
end

-- Enqueue. ----------------------------------------------------------------

-- A job in the enqueue arguments is JOB_FIELDS values (see sortie_enqueue).
local JOB_FIELDS = 14

local function parse_jobs(argv, from, n)
  local jobs = {}
  for i = 1, n do
    local b = from + (i - 1) * JOB_FIELDS
    jobs[i] = {
      q = argv[b], g = argv[b + 1], k = argv[b + 2], p = argv[b + 3], ma = argv[b + 4], ra = argv[b + 5],
      st = argv[b + 6], u = argv[b + 7], pk = argv[b + 8], args = argv[b + 9], x = argv[b + 10],
      idf = argv[b + 11] == '1', dup = tonumber(argv[b + 12]), deps = argv[b + 13],
    }
  end
  return jobs
end

-- check_batch refuses a batch that depends on a job that does not exist,
-- or that a full queue rejects, before anything changes; it drops the
-- oldest jobs of full queues with the drop-oldest policy.
local function check_batch(jobs, now)
  -- An earlier batch of the call may have deferred writes the counts
  -- below read.
  flush()
  for i, j in ipairs(jobs) do
    if j.deps ~= '' then
      for s in string.gmatch(j.deps, '[^,]+') do
        if string.sub(s, 1, 1) ~= '-' and redis.call('EXISTS', jkey(s)) == 0 then
          return { 'E', 'dep', i, s }
        end
      end
    end
  end
  local adding, order = {}, {}
  for _, j in ipairs(jobs) do
    local counts = j.dup < 0
    if counts and j.u ~= '' and redis.call('HEXISTS', ukey(j.g), j.u) == 1 then counts = false end
    if counts then
      local qp = qpre(j.g, j.q)
      if not adding[qp] then adding[qp] = 0; order[#order + 1] = { qp, j.q, j.g } end
      adding[qp] = adding[qp] + 1
    end
  end
  local drops = {}
  for _, o in ipairs(order) do
    local qp = o[1]
    local md = num(redis.call('HGET', qp .. 'cfg', 'md'))
    if md > 0 then
      local cfg = queue_cfg(qp)
      local queued = queued_count(qp)
      local over = math.max(queued + adding[qp] - md, 0)
      if over > 0 then
        if cfg.ov == 0 then return { 'E', 'full', o[2], md, queued, adding[qp] } end
        drops[#drops + 1] = { o[3], o[2], qp, math.min(over, queued), md }
      end
    end
  end
  for _, d in ipairs(drops) do drop_oldest(d[1], d[2], d[3], d[4], d[5], now) end
  return nil
end

-- dep_verdict is store.JudgeDeps: the state of a new job whose start state
-- is st and whose dependencies are in states dstates ({id, state} pairs).
local function dep_verdict(st, idf, dstates)
  local waiting = false
  for _, ds in ipairs(dstates) do
    local dst = ds[2]
    if dst == 'completed' then
      -- done
    elseif FINISHED[dst] then
      if not idf then return 'cancelled', ds end
    else
      waiting = true
    end
  end
  if waiting then return 'waiting' end
  return st
end

-- resolve_deps returns the dependency IDs of job j, each once, in order:
-- existing IDs as given, earlier batch jobs (-(index+1)) through ids.
local function resolve_deps(jobs, j, ids)
  local dl, seen, dstates = {}, {}, {}
  for s in string.gmatch(j.deps, '[^,]+') do
    local d = s
    if string.sub(s, 1, 1) == '-' then
      local x = -tonumber(s)
      d = ids[x]
      if d == '' then d = ids[jobs[x].dup + 1] end
    end
    if not seen[d] then
      seen[d] = true
      dl[#dl + 1] = d
      dstates[#dstates + 1] = { d, redis.call('HGET', jkey(d), 'st') }
    end
  end
  return dl, dstates
end

-- insert_batch inserts checked jobs and returns the flat results: per job
-- ID, duplicate (0/1), state; an in-batch duplicate gets ID '' for the Go
-- side to resolve. workflow gives every job the batch's first ID.
-- IDs: job k of the batch (from 1) gets ID base + k - 1 (new_ids), so
-- IDs increase in the order they are handed out, across queues, and
-- within a batch in batch order. base is the caller's when it took the
-- IDs itself (sortie_ids, on Cluster, where P:seq is on another slot);
-- '' takes them here.
-- SPAWN, while sortie_step_spawn inserts its children, is their parent:
-- { par = ID, ss = step name, cwp = cancel with parent }.
local SPAWN = nil

local function insert_batch(jobs, now, workflow, base)
  local out = {}
  local ids = {}
  local first = nil
  local queues = {}
  if base == '' then base = new_ids(#jobs) else base = tonumber(base) end
  for i, j in ipairs(jobs) do
    local holder = nil
    if j.dup < 0 and j.u ~= '' then holder = redis.call('HGET', ukey(j.g), j.u) end
    if j.dup >= 0 then
      ids[i] = ''
      out[#out + 1] = ''; out[#out + 1] = 1; out[#out + 1] = ''
    elseif holder then
      ids[i] = holder
      out[#out + 1] = holder; out[#out + 1] = 1; out[#out + 1] = redis.call('HGET', jkey(holder), 'st')
    else
      local id = pad(base + i - 1)
      ids[i] = id
      first = first or id
      j.id, j.key, j.qp = id, jkey(id, j.g), qpre(j.g, j.q)
      -- Fields at their usual value are left out to save memory (see
      -- load_job): priority 2, attempt 0, 25 attempts, created at RunAt.
      local f = { 'q', j.q, 'k', j.k, 'ra', j.ra, 'args', j.args }
      if j.p ~= '2' then f[#f + 1] = 'p'; f[#f + 1] = j.p end
      if j.ma ~= '25' then f[#f + 1] = 'ma'; f[#f + 1] = j.ma end
      if j.ra ~= now then f[#f + 1] = 'ca'; f[#f + 1] = now end
      if j.x ~= '' then f[#f + 1] = 'x'; f[#f + 1] = j.x end
      if j.u ~= '' then f[#f + 1] = 'u'; f[#f + 1] = j.u end
      if j.pk ~= '' then f[#f + 1] = 'pk'; f[#f + 1] = j.pk end
      if j.idf then f[#f + 1] = 'idf'; f[#f + 1] = '1' end
      if workflow then f[#f + 1] = 'wf'; f[#f + 1] = first end
      if not CLUSTER then f[#f + 1] = 'g'; f[#f + 1] = j.g end
      j.par = ''
      if SPAWN then
        j.par, j.ss = SPAWN.par, SPAWN.ss
        f[#f + 1] = 'par'; f[#f + 1] = SPAWN.par; f[#f + 1] = 'ss'; f[#f + 1] = SPAWN.ss
        if SPAWN.cwp then f[#f + 1] = 'cwp'; f[#f + 1] = '1' end
      end
      local st, cancel = j.st, nil
      if j.deps ~= '' then
        local dl, dstates = resolve_deps(jobs, j, ids)
        j.d = table.concat(dl, ',')
        f[#f + 1] = 'd'; f[#f + 1] = j.d
        st, cancel = dep_verdict(st, j.idf, dstates)
      end
      if not CLUSTER and not queues[j.q] then
        queues[j.q] = true
        redis.call('SADD', P .. ':queues', j.q)
      end
      if st == 'cancelled' then
        f[#f + 1] = 'e'
        f[#f + 1] = error_line(0, now, string.format(MSG_DEP_ENDED, plain(cancel[1]), cancel[2]))
        enter(j, 'cancelled', now, f)
        cancelled_by(j, cancel[1])
      else
        hold_key(j)
        enter(j, st, now, f)
        if st == 'waiting' then wait_for(j) end
        note_queue(j, now)
      end
      out[#out + 1] = id; out[#out + 1] = 0; out[#out + 1] = st
    end
  end
  return out
end

-- sortie_enqueue inserts batches, each atomically and on its own: a
-- batch that is refused changes nothing and does not affect the others
-- (concurrent callers share one call this way).
-- KEYS[1]: the first job's queue's QP h (routing only).
-- ARGV: P, number of batches, then per batch: now, workflow (0/1), n,
--   sequence base ('': reserve here; see insert_batch), then n jobs of
--   JOB_FIELDS values each: queue, group, kind, priority, max attempts,
--   RunAt, start state (available or scheduled), unique key, partition
--   key, args, x (opaque), ignore dependency failure (0/1), index of the
--   earlier batch job with the same unique key (-1: none), then the
--   dependencies as one comma-separated string: existing IDs, and
--   -(index+1) for an earlier job of the batch.
-- Returns per batch: per job ID, duplicate (0/1), state; or
--   {'E', 'dep', i, id} for an unknown dependency, {'E', 'full', queue,
--   max, queued, adding} for a full queue that rejects.
local function enqueue_one(argv, b)
  local now, n = argv[b], tonumber(argv[b + 2])
  local jobs = parse_jobs(argv, b + 4, n)
  local err = check_batch(jobs, now)
  if err then return err end
  return insert_batch(jobs, now, argv[b + 1] == '1', argv[b + 3])
end

local function enqueue(keys, argv)
  setup(argv[1])
  local out = {}
  local b = 3
  for i = 1, tonumber(argv[2]) do
    out[i] = enqueue_one(argv, b)
    b = b + 4 + tonumber(argv[b + 2]) * JOB_FIELDS
  end
  return out
end

-- Plain enqueues. ---------------------------------------------------------

-- A plain job has no unique key and no dependency: nothing to look up
-- before it is written. sortie_add inserts plain jobs with the fewest
-- commands it can: one HSET a job, and per call one ZADD a set it adds
-- to, one ID reservation, and per queue one look at its settings, one
-- SADD and one wake-up; a call carries the batches of concurrent callers
-- (see redisstore's combiner).
local ADD_FIELDS = 10

-- add_queue returns what sortie_add keeps of queue q of group g, or false
-- when its jobs must take sortie_enqueue (the queue has a max depth).
-- free says whether the queue has no pause and no limit (a waiter may be
-- given its job, waits.give).
local function add_queue(q, g)
  local qp = qpre(g, q)
  local c = redis.call('HMGET', qp .. 'cfg', 'md', 'paused', 'mr', 'rl', 'prl')
  if num(c[1]) > 0 then return false end
  local free = c[2] ~= '1' and num(c[3]) == 0 and num(c[4]) == 0 and num(c[5]) == 0
  return { qp = qp, g = g, s = qp .. 's', h = qp .. 'h', listed = false, free = free }
end

-- add_job writes plain job id (argv[a..a+ADD_FIELDS-1]) of queue qs,
-- enqueued at now.
local function add_job(argv, a, id, qs, now)
  local q, g, k, p, ma, ra, st, pk, args, x =
    argv[a], argv[a + 1], argv[a + 2], argv[a + 3], argv[a + 4], argv[a + 5], argv[a + 6], argv[a + 7], argv[a + 8], argv[a + 9]
  local key = jkey(id, g)
  if p == '2' and ma == '25' and ra == now and x == '' and pk == '' then
    if CLUSTER then
      redis.call('HSET', key, 'q', q, 'k', k, 'ra', ra, 'args', args, 'st', st)
    else
      redis.call('HSET', key, 'q', q, 'k', k, 'ra', ra, 'args', args, 'st', st, 'g', g)
    end
  else
    local f = { 'q', q, 'k', k, 'ra', ra, 'args', args, 'st', st }
    if p ~= '2' then f[#f + 1] = 'p'; f[#f + 1] = p end
    if ma ~= '25' then f[#f + 1] = 'ma'; f[#f + 1] = ma end
    if ra ~= now then f[#f + 1] = 'ca'; f[#f + 1] = now end
    if x ~= '' then f[#f + 1] = 'x'; f[#f + 1] = x end
    if pk ~= '' then f[#f + 1] = 'pk'; f[#f + 1] = pk end
    if not CLUSTER then f[#f + 1] = 'g'; f[#f + 1] = g end
    redis.call('HSET', key, unpack(f))
  end
  index_defer('IADD', qs.qp, st, id)
  if st == 'available' then
    lane_push({ id = id, p = p, k = k, pk = pk, ra = ra, qp = qs.qp })
  else
    defer('ZADD', qs.s, ra, id)
  end
end

-- sortie_add enqueues batches of plain jobs, each batch on its own (the
-- batches of a call share nothing but the call). A batch with a job of a
-- queue that has a max depth is left for sortie_enqueue, whole.
-- KEYS[1]: the first job's queue's QP h (routing only).
-- ARGV: P, number of batches, ID base ('': reserve here; on a cluster
--   the caller's, enough for every job of the call), then per batch: now,
--   n, then n jobs of ADD_FIELDS values each: queue, group, kind,
--   priority, max attempts, RunAt, start state (available or scheduled),
--   partition key, args, x (opaque).
-- Returns per batch the first of its jobs' IDs (the others follow it, in
--   batch order), then ':' and the place in the batch (from 0) of each
--   job given to a waiter, running (waits.give), or 'slow' for a batch
--   left for sortie_enqueue.
local function add(keys, argv)
  setup(argv[1])
  local nb = tonumber(argv[2])
  local queues, slow = {}, {}
  local total, b = 0, 4
  for i = 1, nb do
    local n = tonumber(argv[b + 1])
    for a = b + 2, b + 1 + n * ADD_FIELDS, ADD_FIELDS do
      local q = argv[a]
      local qs = queues[q]
      if qs == nil then
        qs = add_queue(q, argv[a + 1])
        queues[q] = qs
      end
      if not qs then slow[i] = true else qs.n = (qs.n or 0) + 1 end
    end
    if not slow[i] then total = total + n end
    b = b + 2 + n * ADD_FIELDS
  end
  local id = 0
  if total > 0 then
    if argv[3] == '' then id = new_ids(total) else id = tonumber(argv[3]) end
  end
  local out = {}
  b = 4
  for i = 1, nb do
    local now, n = argv[b], tonumber(argv[b + 1])
    if slow[i] then
      out[i] = 'slow'
    else
      out[i] = pad(id)
      for a = b + 2, b + 1 + n * ADD_FIELDS, ADD_FIELDS do
        local qs = queues[argv[a]]
        -- A call's one job of a queue may go straight to a waiter.
        if qs.n == 1 and waits.give(argv, a, pad(id), qs, now) then
          out[i] = out[i] .. ':' .. ((a - b - 2) / ADD_FIELDS)
        else
          add_job(argv, a, pad(id), qs, now)
        end
        id = id + 1
        if not qs.listed then
          qs.listed = true
          if not CLUSTER then redis.call('SADD', P .. ':queues', argv[a]) end
          note(qs.g, argv[a], now)
        end
      end
    end
    b = b + 2 + n * ADD_FIELDS
  end
  return out
end

-- Fetch. ------------------------------------------------------------------

-- promote moves up to PROMOTE_MAX scheduled or retrying jobs due at now to
-- their lanes.
local function promote(g, qp, now)
  for _, s in ipairs(redis.call('ZRANGEBYSCORE', qp .. 's', '-inf', now, 'LIMIT', 0, PROMOTE_MAX)) do
    local j = load_job(s, g)
    leave(j)
    enter(j, 'available')
  end
end

-- window_count returns the starts recorded in the rate window of period
-- ending at now, forgetting those recorded two periods and START_AHEAD
-- before it (ratelimit.Window.ForgetBefore).
local function window_count(key, now, period)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', tpad(now - 2 * period - START_AHEAD))
  return redis.call('ZCOUNT', key, '(' .. tpad(now - period), '+inf')
end

-- free_at returns when the window next allows a start (ratelimit.Window.FreeAt).
local function free_at(key, now, period, limit)
  local started = redis.call('ZCOUNT', key, '(' .. tpad(now - period), '+inf')
  local need = started - limit + 1
  if need <= 0 then return 0 end
  local s = redis.call('ZRANGEBYSCORE', key, '(' .. tpad(now - period), '+inf', 'WITHSCORES', 'LIMIT', need - 1, 1)
  if #s == 0 then return 0 end
  return tonumber(s[2]) + period
end

-- take removes up to n members from the front of lane lid of a queue of
-- group g (its list's and its sorted set's, in member order), none past
-- the lane member next (the lexkey of the following head in the queue's
-- heads, nil when none; a member equal to it is the same job, listed
-- twice, once stale), moves the lane's head, and returns the members,
-- how many stale members it dropped behind them (lane_clean) and the
-- lane's new head (nil: the lane is empty). A member returned may be
-- stale (see the lanes): the caller checks.
local function take(qp, g, lid, head, n, next)
  local lk, zk = qp .. 'L:' .. lid, qp .. 'l:' .. lid
  local zs
  if next then
    zs = redis.call('ZRANGE', zk, '-', '[' .. next, 'BYLEX', 'LIMIT', 0, n)
  else
    zs = redis.call('ZRANGE', zk, 0, n - 1)
  end
  local ls = redis.call('LRANGE', lk, 0, n - 1)
  local out, a, b = {}, 1, 1
  while #out < n do
    local x, y = ls[a], zs[b]
    if x and next and x > next then x = nil end
    if x and (not y or x < y) then
      out[#out + 1] = x
      a = a + 1
    elseif y then
      out[#out + 1] = y
      b = b + 1
    else
      break
    end
  end
  if a > 1 then redis.call('LTRIM', lk, a - 1, -1) end
  if b > 1 then redis.call('ZREMRANGEBYRANK', zk, 0, b - 2) end
  redis.call('ZREM', qp .. 'h', head)
  -- A read that came back short and was taken whole emptied its half of
  -- the lane, which then need not be read again.
  local dropped, front = 0, nil
  if a - 1 == #ls and #ls < n then front = false end
  if front == nil then dropped, front = lane_clean(lk, g, lid) end
  local nh = lane_head(lk, zk, front, not next and b - 1 == #zs and #zs < n)
  if nh then redis.call('ZADD', qp .. 'h', 0, nh .. lid) end
  return out, dropped, nh
end

-- sortie_fetch claims up to limit available jobs of one queue.
-- KEYS[1]: the queue's heads key QP h.
-- ARGV: P, queue, group, now, lease until (now + lease), worker, limit,
--   then the kinds to claim (none: every kind).
-- Returns: NextAt (0 when none or the fetch is full), then per claimed
--   job, in claim order, its ID and claim token; the caller reads the
--   jobs (the claim set st running, ata now or the job's RunAt or
--   CreatedAt when later, atb worker, lu and tok; the attempt is a + 1
--   while running). Rate windows record the start at ata.
local function fetch(keys, argv)
  setup(argv[1])
  local q, g, now, lu, worker, limit = argv[2], argv[3], argv[4], argv[5], argv[6], tonumber(argv[7])
  local kinds = nil
  if #argv > 7 then
    kinds = {}
    for i = 8, #argv do kinds[argv[i]] = true end
  end
  local qp = qpre(g, q)
  local cfg = queue_cfg(qp)
  -- The first scheduled job: promoted with the others due when it is
  -- due; else, unchanged by the claim, its RunAt is the NextAt.
  local first = redis.call('ZRANGE', qp .. 's', 0, 0, 'WITHSCORES')
  if first[2] and tonumber(first[2]) <= tonumber(now) then
    promote(g, qp, now)
    flush()
    first = nil
  end
  local out = { '0' }
  if cfg.paused then return out end
  local room, started, nnow = limit, 0, 0
  if cfg.mr > 0 then room = math.min(room, cfg.mr - redis.call('ZCARD', qp .. 'r')) end
  if cfg.rl > 0 or cfg.prl > 0 then nnow = tonumber(now) end
  if cfg.rl > 0 then
    started = window_count(qp .. 'rate', nnow, cfg.rp)
    room = math.min(room, cfg.rl - started)
  end
  local partitioned = cfg.pmr > 0 or cfg.prl > 0
  local proom = {}
  local function part_room(pk)
    local r = proom[pk]
    if r == nil then
      r = limit
      if cfg.pmr > 0 then r = math.min(r, cfg.pmr - num(redis.call('HGET', qp .. 'prun', pk))) end
      if cfg.prl > 0 then r = math.min(r, cfg.prl - window_count(qp .. 'pr:' .. pk, nnow, cfg.prp)) end
      proom[pk] = r
    end
    return r
  end
  local got, skip, tok, stale = 0, 0, 0, 0
  if room > 0 then tok = new_values(P .. ':{' .. g .. '}:tok', room) - 1 end
  local ikey, rkey = qp .. 'i:available', qp .. 'r'
  while got < room and skip <= SKIP_MAX and stale < STALE_MAX do
    local hs = redis.call('ZRANGE', qp .. 'h', skip, skip + 1)
    local h = hs[1]
    if not h then break end
    local lid = string.sub(h, 36)
    local sep = string.find(lid, '\0', 1, true)
    local kind, pk = string.sub(lid, 2, sep - 1), string.sub(lid, sep + 1)
    if hs[2] and string.sub(hs[2], 36) == lid then
      -- Two heads of one lane: the first is not the lane's (the heads
      -- were written by another hand). Dropped, so that claims do not
      -- go one job at a time up to the second.
      redis.call('ZREM', qp .. 'h', h)
      stale = stale + 1
    elseif (kinds and not kinds[kind]) or (partitioned and pk ~= '' and part_room(pk) <= 0) then
      skip = skip + 1
    else
      local n = room - got
      if partitioned and pk ~= '' then n = math.min(n, part_room(pk)) end
      local next = nil
      if hs[2] then next = string.sub(hs[2], 1, 35) end
      local ms, dropped, nh = take(qp, g, lid, h, n, next)
      stale = stale + dropped
      -- take always takes the head's member; nothing taken would mean
      -- the heads are wrong, and the loop must not spin on them.
      if #ms == 0 then break end
      for _, m in ipairs(ms) do
        local id = string.sub(m, 20)
        local key = jkey(id, g)
        local ra = string.sub(m, 2, 19)
        -- A stale member (see the lanes) is dropped.
        local v = lane_live(m, g, lid, key)
        if not v then stale = stale + 1 end
        if v then
          got, tok = got + 1, tok + 1
          local ts = string.format('%d', tok)
          -- The start is now, or the job's RunAt or CreatedAt when later
          -- (store.ClaimedAt); all are 18 digits, so they compare as strings.
          local ata = now
          if ra > ata then ata = ra end
          local ca = v[3]
          if ca and ca > ata then ata = ca end
          redis.call('HSET', key, 'st', 'running', 'ata', ata, 'atb', worker, 'lu', lu, 'tok', ts)
          index_defer('IREM', qp, 'available', id, ikey)
          defer('ZADD', rkey, lu, id)
          if pk ~= '' then
            redis.call('HINCRBY', qp .. 'prun', pk, 1)
            if partitioned then proom[pk] = proom[pk] - 1 end
            if cfg.prl > 0 then defer('ZADD', qp .. 'pr:' .. pk, ata, id .. ':' .. ts) end
          end
          if cfg.rl > 0 then defer('ZADD', qp .. 'rate', ata, id .. ':' .. ts) end
          out[#out + 1] = id
          out[#out + 1] = ts
        end
      end
      -- The head taken was the last from skip on, and its lane is empty.
      if not hs[2] and not nh then break end
    end
  end
  flush()
  if got < limit then
    local next = 0
    if not first then first = redis.call('ZRANGE', qp .. 's', 0, 0, 'WITHSCORES') end
    if #first > 0 then next = tonumber(first[2]) end
    if cfg.rl > 0 and started + got >= cfg.rl and state_count(qp, 'available') > 0 then
      local f = free_at(qp .. 'rate', nnow, cfg.rp, cfg.rl)
      if f > 0 and (next == 0 or f < next) then next = f end
    end
    -- Stopped by stale members with jobs perhaps left: come back now.
    if stale >= STALE_MAX then next = tonumber(now) end
    out[1] = tpad(next)
  end
  return out
end

-- sortie_fetch_rows is sortie_fetch that also returns the claimed jobs.
-- KEYS and ARGV: sortie_fetch's.
-- Returns: sortie_fetch's reply, then per claimed job, in claim order, its
--   hash's fields and values (HGETALL). A caller far from the server saves
--   the round trip of reading the jobs after the claim; the server pays
--   for passing the hashes through Lua, so near callers use sortie_fetch.
local function fetch_rows(keys, argv)
  local out = fetch(keys, argv)
  local n = #out
  for i = 2, n, 2 do out[#out + 1] = redis.call('HGETALL', jkey(out[i], argv[3])) end
  return out
end

-- ROWS_FEW is the most jobs sortie_claim returns with their hashes.
local ROWS_FEW = {{ROWS_FEW}}

-- sortie_claim is sortie_fetch that returns the claimed jobs too when it
-- claimed at most ROWS_FEW: a worker woken for a job or two then starts it
-- after one round trip instead of two, and a claim of many (a backlog)
-- leaves the reading to the caller's pipeline, which costs the server
-- less than passing the hashes through Lua.
-- KEYS and ARGV: sortie_fetch's.
-- Returns: NextAt, then '1' when the jobs' hashes follow the claims or
--   '0', then per claimed job its ID and claim token, then with '1' per
--   claimed job its hash's fields and values (HGETALL).
local function claim(keys, argv)
  local out = fetch(keys, argv)
  local n = (#out - 1) / 2
  if n == 0 or n > ROWS_FEW then
    table.insert(out, 2, '0')
    return out
  end
  for i = 2, #out, 2 do out[#out + 1] = redis.call('HGETALL', jkey(out[i], argv[3])) end
  table.insert(out, 2, '1')
  return out
end

-- Waiting claims. ---------------------------------------------------------
--
-- A worker process whose queue has nothing for it may wait on the server
-- (sortie_claim_wait) instead of on the queue's watch channel: it is
-- registered in the queue's waiters, QP w (waiter ID -> its claim's
-- expiry, limit, lease, worker and kinds, encoded), and blocks on its
-- hand list, QP H:<waiter ID> (BLPOP). A call that notes the queue (see
-- the notifications) then, as it ends, claims jobs for each waiter, in
-- the same step, as sortie_fetch would for the waiter's worker, lease,
-- kinds and limit (at most ROWS_FEW) at the note's now, and pushes them
-- with their hashes to the waiter's hand list; a waiter it claims none
-- for, or a note without a now, gets an empty item, a wake-up to claim
-- again, as is every waiter of a rate-limited queue (whose claims reserve
-- their start ahead: the producer's ratestart.go). Either way the waiter
-- is removed: one item per registration. A call that enqueues one plain
-- job of a queue with a waiter that would claim it first writes it
-- running for the waiter straight away (waits.give) rather than into its
-- lane and out again. A worker woken for a new job starts it one trip
-- after the enqueue instead of two (the wake-up, then its claim). A
-- waiter past its expiry (its process gone) is dropped unwoken; jobs
-- pushed to a process that died are claimed jobs like any other, rescued
-- once their lease ends.
do
  -- WAIT_GRACE is how long past its wait a waiter stays registered: its
  -- process ends the wait (sortie_unwait) within it unless it is gone.
  local WAIT_GRACE = 2000000

  -- enc joins strings, each as its length, ':' and itself; dec splits.
  local function enc(l)
    local b = {}
    for i = 1, #l do b[i] = #l[i] .. ':' .. l[i] end
    return table.concat(b)
  end
  local function dec(s)
    local l, i = {}, 1
    while i <= #s do
      local c = string.find(s, ':', i, true)
      local n = tonumber(string.sub(s, i, c - 1))
      l[#l + 1] = string.sub(s, c + 1, c + n)
      i = c + n + 1
    end
    return l
  end

  -- emptied holds the queues of the call whose last waiter give took.
  local emptied = {}

  -- unwaited holds the queues (by prefix) known to have no waiter: a
  -- call that read a queue's waiters and found none, or handed to the
  -- last, says so, and a waiter's registration forgets it. A call that
  -- notes such a queue reads no waiters. A library-level table, which
  -- Redis keeps between calls and starts empty when it loads the library
  -- (every queue unknown, read once again).
  local unwaited = {}

  -- hand claims jobs of queue q of group g at now (nil: none, wake-ups
  -- only) for each of its waiters and pushes each its item.
  local function hand(g, q, now)
    local qp = qpre(g, q)
    if emptied[qp] or unwaited[qp] then return end
    local ws = redis.call('HGETALL', qp .. 'w')
    unwaited[qp] = true
    if #ws == 0 then return end
    redis.call('DEL', qp .. 'w')
    local t = clock_us()
    for i = 1, #ws, 2 do
      -- w: expiry, limit, lease (µs), worker, then the kinds.
      local w = dec(ws[i + 1])
      if tonumber(w[1]) >= t then
        local item = ''
        -- A rate-limited queue's claims reserve their start ahead (see
        -- the producer's ratestart.go): its waiters are only woken.
        local rl = now and redis.call('HMGET', qp .. 'cfg', 'rl', 'prl')
        if rl and num(rl[1]) == 0 and num(rl[2]) == 0 then
          local fa = { (CLUSTER and 'c' or 's') .. P, q, g, now, tpad(tonumber(now) + tonumber(w[3])), w[4],
            tostring(math.min(tonumber(w[2]), ROWS_FEW)) }
          for k = 5, #w do fa[#fa + 1] = w[k] end
          local out = fetch({ qp .. 'h' }, fa)
          if #out > 1 then
            local l = { out[1] }
            for k = 2, #out, 2 do
              local h = redis.call('HGETALL', jkey(out[k], g))
              l[#l + 1] = out[k]
              l[#l + 1] = out[k + 1]
              l[#l + 1] = tostring(#h)
              for _, x in ipairs(h) do l[#l + 1] = x end
            end
            item = enc(l)
          end
        end
        local hk = qp .. 'H:' .. ws[i]
        redis.call('RPUSH', hk, item)
        redis.call('PEXPIRE', hk, math.max(1000, math.floor(tonumber(w[3]) / 1000)))
      end
    end
  end

  -- takes says whether waiter w (decoded) claims jobs of kind k.
  local function takes(w, k)
    if #w < 5 then return true end
    for i = 5, #w do
      if w[i] == k then return true end
    end
    return false
  end

  -- give claims plain job id (argv[a..a+ADD_FIELDS-1], see add_job) of
  -- queue qs, enqueued at now, for a waiter of the queue as it is
  -- written, when the waiter would claim it first: the queue has no
  -- available job and no scheduled job due, no limit and no pause, and the
  -- job is the call's only one of the queue. It returns false, having
  -- changed nothing, when it does not. The job is written running (as a
  -- claim at now leaves it) instead of being added to its lane and taken
  -- from it again.
  function waits.give(argv, a, id, qs, now)
    local q, g, k, p, ma, ra, st, pk, args, x =
      argv[a], argv[a + 1], argv[a + 2], argv[a + 3], argv[a + 4], argv[a + 5], argv[a + 6], argv[a + 7], argv[a + 8], argv[a + 9]
    if st ~= 'available' or pk ~= '' or not qs.free then return false end
    local qp = qs.qp
    if unwaited[qp] then return false end
    local ws = redis.call('HGETALL', qp .. 'w')
    if #ws == 0 then
      unwaited[qp] = true
      return false
    end
    if state_count(qp, 'available') > 0 then return false end
    local first = redis.call('ZRANGE', qs.s, 0, 0, 'WITHSCORES')
    if first[2] and tonumber(first[2]) <= tonumber(now) then return false end
    local t, wid, w = clock_us(), nil, nil
    for i = 1, #ws, 2 do
      local v = dec(ws[i + 1])
      if tonumber(v[1]) >= t and takes(v, k) then
        wid, w = ws[i], v
        break
      end
    end
    if not wid then return false end
    redis.call('HDEL', qp .. 'w', wid)
    -- The call's hand_all need not read the queue's waiters again.
    if #ws == 2 then
      emptied[qp] = true
      unwaited[qp] = true
    end
    local tok = string.format('%d', new_values(P .. ':{' .. g .. '}:tok', 1))
    local lu = tpad(tonumber(now) + tonumber(w[3]))
    local f = { 'q', q, 'k', k, 'ra', ra, 'args', args, 'st', 'running', 'ata', now, 'atb', w[4], 'lu', lu, 'tok', tok }
    if p ~= '2' then f[#f + 1] = 'p'; f[#f + 1] = p end
    if ma ~= '25' then f[#f + 1] = 'ma'; f[#f + 1] = ma end
    if ra ~= now then f[#f + 1] = 'ca'; f[#f + 1] = now end
    if x ~= '' then f[#f + 1] = 'x'; f[#f + 1] = x end
    if not CLUSTER then f[#f + 1] = 'g'; f[#f + 1] = g end
    redis.call('HSET', jkey(id, g), unpack(f))
    defer('ZADD', qp .. 'r', lu, id)
    -- NextAt, as a claim of fewer jobs than its limit gives it, and the
    -- job's hash as written (it is new).
    local next = '0'
    if first[2] and w[2] ~= '1' then next = tpad(tonumber(first[2])) end
    local l = { next, id, tok, tostring(#f) }
    for _, v in ipairs(f) do l[#l + 1] = v end
    local hk = qp .. 'H:' .. wid
    redis.call('RPUSH', hk, enc(l))
    redis.call('PEXPIRE', hk, math.max(1000, math.floor(tonumber(w[3]) / 1000)))
    return true
  end

  -- hand_all hands to the waiters of every queue noted in the call; with
  -- wake, it only wakes them (a function that runs under OOM must not
  -- copy jobs into hand lists).
  function waits.hand_all(wake)
    for _, n in pairs(notes) do
      if wake then hand(n[1], n[2], nil) else hand(n[1], n[2], n[3]) end
    end
  end

  -- begin starts a call with no queue emptied (a call that failed may
  -- have left some).
  function waits.begin()
    if next(emptied) ~= nil then emptied = {} end
  end

  -- sortie_claim_wait is sortie_claim that, when it claims nothing,
  -- registers the caller as a waiter of the queue for up to its wait
  -- (less when a scheduled job comes due sooner), unless that is under a
  -- millisecond.
  -- KEYS[1]: the queue's heads key QP h.
  -- ARGV: sortie_fetch's first seven (P, queue, group, now, lease until,
  --   worker, limit), then the waiter ID, the wait (µs), the lease (µs),
  --   then the kinds.
  -- Returns: sortie_claim's reply, its flag 'w' when the caller waits;
  --   or '0', 'h' and the item handed to the waiter ID already.
  function waits.claim(keys, argv)
    setup(argv[1])
    -- A call sent again after its reply was lost (the same waiter ID) may
    -- find the item handed to the first one's registration: that item is
    -- the reply.
    local hk = qpre(argv[3], argv[2]) .. 'H:' .. argv[8]
    local item = redis.call('LPOP', hk)
    if item then
      redis.call('DEL', hk)
      return { '0', 'h', item }
    end
    local fa = { argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], argv[7] }
    for i = 11, #argv do fa[#fa + 1] = argv[i] end
    local out = claim(keys, fa)
    if #out > 2 then return out end
    local wait, next = tonumber(argv[9]), tonumber(out[1])
    if next > 0 then wait = math.min(wait, next - tonumber(argv[4])) end
    if wait < 1000 then return out end
    local t = clock_us()
    local w = { string.format('%d', t + wait + WAIT_GRACE), argv[7], argv[10], argv[6] }
    for i = 11, #argv do w[#w + 1] = argv[i] end
    local wk = qpre(argv[3], argv[2]) .. 'w'
    -- Waiters of processes gone are dropped here too, in case no call
    -- notes the queue again.
    local ws = redis.call('HGETALL', wk)
    for i = 1, #ws, 2 do
      if tonumber(dec(ws[i + 1])[1]) < t then redis.call('HDEL', wk, ws[i]) end
    end
    redis.call('HSET', wk, argv[8], enc(w))
    unwaited[qpre(argv[3], argv[2])] = nil
    out[2] = 'w'
    return out
  end

  -- sortie_unwait ends a wait. With wake '1' it wakes the waiter, blocked
  -- on its hand list, with an empty item unless it was handed one (its
  -- process stops); otherwise it takes the waiter's item, if it was
  -- handed one, and removes its hand list (its wait timed out).
  -- KEYS[1]: the queue's heads key QP h (routing only).
  -- ARGV: P, queue, group, waiter ID, wake ('1' or '0').
  -- Returns the item, or '' when there is none.
  function waits.unwait(keys, argv)
    setup(argv[1])
    local qp = qpre(argv[3], argv[2])
    local hk = qp .. 'H:' .. argv[4]
    local was = redis.call('HDEL', qp .. 'w', argv[4])
    if argv[5] == '1' then
      if was == 1 then
        redis.call('RPUSH', hk, '')
        redis.call('PEXPIRE', hk, 60000)
      end
      return ''
    end
    local item = redis.call('LPOP', hk)
    redis.call('DEL', hk)
    return item or ''
  end
end

-- Finish. -----------------------------------------------------------------

-- The report kinds, as store.ReportKind numbers them.
local COMPLETED, FAILED, CANCELLED, SNOOZED, RELEASED = '1', '2', '3', '4', '5'
-- REPORT_FIELDS values a report in sortie_finish and sortie_release;
-- sortie_finish_u and sortie_release_u take REPORT_FIELDS_U, the same
-- and unstarted (library version 11; version 10's processes, still
-- running during an upgrade, call the first two).
local REPORT_FIELDS, REPORT_FIELDS_U = 12, 13

-- give_back forgets the start that running job j's claim (token tok)
-- logged in the rate windows that counted it, the queue's and its
-- partition's: its handler never started (store.Report.Unstarted).
local function give_back(j, tok)
  local m = j.id .. ':' .. tok
  redis.call('ZREM', j.qp .. 'rate', m)
  if j.pk ~= '' then redis.call('ZREM', j.qp .. 'pr:' .. j.pk, m) end
end

-- apply_report moves running job j on by one report (store.Transitions).
-- r: kind, runat, has error, error attempt, error at, message, stack,
-- has result, result, unstarted.
local function apply_report(j, r, now)
  leave(j)
  local f = keep_created(j, { 'lu', '', 'cr', '' })
  local st
  local kind = r.kind
  local runat = r.runat
  if runat == '0' then runat = now end
  if kind == COMPLETED then
    st = 'completed'
    f[#f + 1] = 'res'; f[#f + 1] = r.res; f[#f + 1] = 'hr'; f[#f + 1] = r.hr
  elseif kind == FAILED then
    if j.a >= j.ma then
      st = 'dead'
    else
      st = 'retrying'
      j.ra = runat
      count(j.qp, now, 'retried')
    end
  elseif kind == CANCELLED then
    st = 'cancelled'
  elseif kind == SNOOZED then
    j.ra = runat
    if runat > now then st = 'scheduled' else st = 'available' end
  else
    st = 'available'
  end
  if kind == FAILED or (kind == CANCELLED and r.haserr) then
    local a = r.ea
    if a == '0' then a = j.a end
    local at = r.eat
    if at == '0' then at = now end
    local m = r.msg
    if m == '' then m = MSG_NO_ERROR end
    f[#f + 1] = 'e'; f[#f + 1] = with_error(j, error_line(a, at, m, r.stack))
  end
  if kind == RELEASED and r.unstarted then give_back(j, r.tok) end
  if kind == SNOOZED or kind == RELEASED then j.a = j.a - 1 end
  f[#f + 1] = 'a'; f[#f + 1] = j.a
  f[#f + 1] = 'ft'; f[#f + 1] = r.tok .. ':' .. st
  if kind == FAILED or kind == SNOOZED then
    f[#f + 1] = 'ra'; f[#f + 1] = j.ra
  end
  if j.wt ~= '' then f[#f + 1] = 'wt'; f[#f + 1] = '' end
  if FINISHED[st] then
    release_key(j)
    enter(j, st, now, f)
    done(j)
    settle(j.id, st, now, j.hd)
    child_moved(j, -1, now)
  else
    enter(j, st, now, f)
    note_queue(j, now)
  end
  return st
end

-- sortie_finish applies the reports of finished attempts, each only if
-- its job is running with the report's claim token (fencing).
-- KEYS[1]: the first report's job key (routing only).
-- ARGV: P, now, n, then n reports of REPORT_FIELDS values each (sortie_finish_u:
--   REPORT_FIELDS_U, ending with unstarted): ID, its
--   group, claim token, kind (store.ReportKind), RunAt ('0': now), has
--   error (0/1), error attempt ('0': the job's), error at ('0': now),
--   message, stack, the result: '' for none, else '1' followed by the
--   bytes, resent (0/1: the caller's earlier call with this report
--   failed, so it may have been applied), and unstarted (0/1: a release
--   whose handler never started gives its start back to the rate
--   windows).
-- Returns per report: state after it, or '' when refused. A resent
--   report whose outcome was applied already under the same token (ft:
--   the first call's reply was lost) returns the state that outcome
--   left, and changes nothing; any other report for a job not running
--   under its token is refused.
-- The fields finish and complete read of a job: st, tok, q, pk, u, hd,
-- a, g, ft, cr, hr, par, ss.
local FINISH_FIELDS = { 'st', 'tok', 'q', 'pk', 'u', 'hd', 'a', 'g', 'ft', 'cr', 'hr', 'par', 'ss' }

-- astr returns attempt number a as a string, from a cache for the
-- numbers a job usually reaches (formatting one costs more than the
-- lookup).
local ASTR = {}
local function astr(a)
  local v = ASTR[a]
  if not v then
    v = string.format('%d', a)
    if a <= 1000 then ASTR[a] = v end
  end
  return v
end

-- complete is the common report, completed, applied without loading the
-- whole job: v holds its FINISH_FIELDS. It writes what changes: the
-- state, the attempt, when, the token and state of the outcome (ft), and
-- the result, or clears one an earlier completion left (a job retried by
-- an operator), and the lease; a cancel request only when there was one.
local function complete(id, g, key, v, now, res, qps, tok)
  local q, pk, u = v[3], v[4] or '', v[5] or ''
  local qp = qps[q]
  if not qp then
    local pre = qpre(g, q)
    qp = { r = pre .. 'r', qp = pre, ix = pre .. 'i:completed', n = 0 }
    qps[q] = qp
  end
  local a = num(v[7]) + 1
  local ft = tok .. ':completed'
  if res == '' and v[10] ~= '1' and v[11] ~= '1' then
    redis.call('HSET', key, 'st', 'completed', 'a', astr(a), 'fa', now, 'lu', '', 'ft', ft)
  else
    local f = { 'st', 'completed', 'a', astr(a), 'fa', now, 'lu', '', 'ft', ft }
    if res ~= '' or v[11] == '1' then
      f[#f + 1] = 'res'; f[#f + 1] = string.sub(res, 2); f[#f + 1] = 'hr'; f[#f + 1] = string.sub(res, 1, 1)
    end
    if v[10] == '1' then f[#f + 1] = 'cr'; f[#f + 1] = '' end
    redis.call('HSET', key, unpack(f))
  end
  defer('ZREM', qp.r, id)
  index_defer('IADD', qp.qp, 'completed', id, qp.ix)
  local child = v[12] and { par = v[12], ss = v[13] or '' }
  if not child or not held(child) then fin_push(qp.qp, 'completed', now, id) end
  qp.n = qp.n + 1
  if pk ~= '' then redis.call('HINCRBY', qp.qp .. 'prun', pk, -1) end
  if u ~= '' then release_key({ id = id, g = g, u = u }) end
  done_id(g, id)
  if v[6] == '1' then settle(id, 'completed', now, true) end
  if child then child_moved(child, -1, now) end
end

-- count_completed counts in the history the jobs complete completed, per
-- queue (qps: complete's cache), once per queue and call.
local function count_completed(qps, now)
  for _, qp in pairs(qps) do
    if qp.n > 0 then count(qp.qp, now, 'completed', qp.n) end
  end
end

-- note_limited notes the watchers of queue q of group g when it has a
-- running limit (a finished job frees a slot), once per queue and call
-- (limited caches it).
local function note_limited(limited, g, q, now)
  if limited[q] ~= nil then return end
  local c = redis.call('HMGET', qpre(g, q) .. 'cfg', 'mr', 'pmr')
  limited[q] = num(c[1]) > 0 or num(c[2]) > 0
  if limited[q] then note(g, q, now) end
end

local function finish_fields(keys, argv, fields)
  setup(argv[1])
  local now = argv[2]
  local n = tonumber(argv[3])
  local out = {}
  local limited = {}
  local qps = {}
  for i = 1, n do
    local b = 4 + (i - 1) * fields
    local id, g = argv[b], argv[b + 1]
    local key = jkey(id, g)
    local v = redis.call('HMGET', key, unpack(FINISH_FIELDS))
    if v[8] and not CLUSTER then g = v[8] end
    if v[1] == 'running' and v[2] == argv[b + 2] then
      note_limited(limited, g, v[3], now)
      if argv[b + 3] == COMPLETED then
        complete(id, g, key, v, now, argv[b + 10], qps, argv[b + 2])
        out[i] = 'completed'
      else
        local res = argv[b + 10]
        local r = {
          kind = argv[b + 3], tok = argv[b + 2], runat = argv[b + 4], haserr = argv[b + 5] == '1', ea = argv[b + 6],
          eat = argv[b + 7], msg = argv[b + 8], stack = argv[b + 9], res = string.sub(res, 2), hr = string.sub(res, 1, 1),
          unstarted = fields == REPORT_FIELDS_U and argv[b + 12] == '1',
        }
        out[i] = apply_report(load_job(id, g), r, now)
      end
    elseif argv[b + 11] == '1' and v[9] and string.sub(v[9], 1, #argv[b + 2] + 1) == argv[b + 2] .. ':' then
      -- A report sent again because the first call's reply was lost,
      -- whose outcome that call applied: its result, not a refusal.
      out[i] = string.sub(v[9], #argv[b + 2] + 2)
    else
      out[i] = ''
    end
  end
  count_completed(qps, now)
  return out
end

local function finish(keys, argv) return finish_fields(keys, argv, REPORT_FIELDS) end
local function finish_u(keys, argv) return finish_fields(keys, argv, REPORT_FIELDS_U) end

-- sortie_complete applies completions, each only if its job is running
-- with the report's claim token: sortie_finish's completed reports (not
-- resent ones), with 4 arguments a report instead of 12.
-- KEYS[1]: the first report's job key (routing only).
-- ARGV: P, now, n, then n reports of 4 values: ID, its group, claim
--   token, the result ('' for none, else '1' followed by the bytes).
-- Returns per report 'completed', or '' when refused.
local function complete_all(keys, argv)
  setup(argv[1])
  local now, n = argv[2], tonumber(argv[3])
  local out, limited, qps = {}, {}, {}
  for i = 1, n do
    local b = 4 + (i - 1) * 4
    local id, g, tok = argv[b], argv[b + 1], argv[b + 2]
    local key = jkey(id, g)
    local v = redis.call('HMGET', key, unpack(FINISH_FIELDS))
    if v[8] and not CLUSTER then g = v[8] end
    if v[1] == 'running' and v[2] == tok then
      note_limited(limited, g, v[3], now)
      complete(id, g, key, v, now, argv[b + 3], qps, tok)
      out[i] = 'completed'
    else
      out[i] = ''
    end
  end
  count_completed(qps, now)
  return out
end

-- sortie_extend extends the leases still held and records progress.
-- KEYS[1]: the first lease's job key (routing only).
-- ARGV: P, lease until (now + lease), n, then n leases of 5 values: ID,
--   its group, claim token, has progress (0/1), progress.
-- Returns per lease: 0 lost, 1 held, 2 held with a cancel requested.
local function extend(keys, argv)
  setup(argv[1])
  local lu, n = argv[2], tonumber(argv[3])
  local out = {}
  for i = 1, n do
    local b = 4 + (i - 1) * 5
    local id, g = argv[b], argv[b + 1]
    local k = jkey(id, g)
    local v = redis.call('HMGET', k, 'st', 'tok', 'cr', 'q', 'g')
    if v[5] and not CLUSTER then g = v[5] end
    if v[1] == 'running' and v[2] == argv[b + 2] then
      if argv[b + 3] == '1' then
        redis.call('HSET', k, 'lu', lu, 'pr', argv[b + 4])
      else
        redis.call('HSET', k, 'lu', lu)
      end
      defer('ZADD', qpre(g, v[4]) .. 'r', lu, id)
      if v[3] == '1' then out[i] = 2 else out[i] = 1 end
    else
      out[i] = 0
    end
  end
  return out
end

-- sortie_rescue takes back up to limit running jobs of one queue whose
-- lease expired before now (store.RescueState).
-- KEYS[1]: the queue's running set QP r.
-- ARGV: P, queue, group, now, limit.
-- Returns the number of jobs rescued.
local function rescue(keys, argv)
  setup(argv[1])
  local q, g, now, limit = argv[2], argv[3], argv[4], tonumber(argv[5])
  local qp = qpre(g, q)
  local ids = redis.call('ZRANGEBYSCORE', qp .. 'r', '-inf', '(' .. now, 'LIMIT', 0, limit)
  for _, s in ipairs(ids) do
    local j = load_job(s, g)
    leave(j)
    local f = { 'a', j.a, 'lu', '', 'cr', '', 'e', with_error(j, error_line(j.a, now, MSG_LEASE_LOST)) }
    local st
    if j.cr then st = 'cancelled' elseif j.a >= j.ma then st = 'dead' else st = 'available' end
    if FINISHED[st] then
      release_key(j)
      enter(j, st, now, f)
      done(j)
      settle(j.id, st, now, j.hd)
      child_moved(j, -1, now)
    else
      enter(j, st, now, f)
      note_queue(j, now)
      count(qp, now, 'retried')
    end
  end
  return #ids
end

-- forget_fid forgets where deleted job j was, when P:fid records it (its
-- ID gives another group than its own). On a cluster P:fid is on another
-- slot: it returns true for the caller to delete the entry.
local function forget_fid(j)
  if is_new(j.id) or j.g == natural_group(j.id) then return false end
  if CLUSTER then return true end
  redis.call('HDEL', P .. ':fid', j.id)
  return false
end

-- kids_of returns the IDs of the children job key's spawn steps
-- enqueued (none for a job without spawn steps).
local function kids_of(key)
  local out = {}
  for _, csv in ipairs(redis.call('HVALS', key .. ':sc')) do
    for c in string.gmatch(csv, '[^,]+') do out[#out + 1] = c end
  end
  return out
end

-- cancel_kids cancels the pending children kids of job id (cancelled, or
-- deleted when deleted) that have CancelWithParent, as cancel_job would
-- (a running one is asked to stop), and theirs in turn; each job is
-- visited once, since a job has one parent.
local function cancel_kids(id, kids, deleted, now)
  local stack = { { id, kids, deleted } }
  while #stack > 0 do
    local e = table.remove(stack)
    local fmt = MSG_PARENT_CANCELLED
    if e[3] then fmt = MSG_PARENT_DELETED end
    for _, c in ipairs(e[2]) do
      local cj = load_job(c)
      if cj and cj.cwp and PENDING[cj.st] then
        if cj.st == 'running' then
          redis.call('HSET', cj.key, 'cr', '1')
        else
          local msg = string.format(fmt, plain(e[1]))
          finalize(cj, 'cancelled', now, { 'e', with_error(cj, error_line(cj.a, now, msg)) })
          settle(cj.id, 'cancelled', now, cj.hd)
        end
        stack[#stack + 1] = { cj.id, kids_of(cj.key), false }
      end
    end
  end
end

-- free_kids puts the finished children kids of a job just deleted into
-- their queues' finished sets, where pruning finds them.
local function free_kids(kids)
  for _, c in ipairs(kids) do
    local k = jkey(c)
    local v = redis.call('HMGET', k, 'st', 'fa', 'q')
    if v[1] and FINISHED[v[1]] then
      local g = gof(c)
      fin_push(qpre(g, v[3]), v[1], v[2], c)
    end
  end
end

-- drop_steps deletes the steps of job key (being deleted).
local function drop_steps(key)
  redis.call('DEL', key .. ':sm', key .. ':sr', key .. ':sc')
end

-- Operators. --------------------------------------------------------------

-- cancel_job cancels pending job id, or asks a running one to stop
-- (store.Store.JobCancel). It returns the job, or nil and the refusal
-- {'E', 'notfound'}.
local function cancel_job(id, now)
  local j = load_job(id)
  if not j then return nil, { 'E', 'notfound' } end
  if j.st == 'running' then
    redis.call('HSET', j.key, 'cr', '1')
  elseif PENDING[j.st] then
    finalize(j, 'cancelled', now)
    settle(j.id, 'cancelled', now, j.hd)
  else
    return j
  end
  local kids = kids_of(j.key)
  if #kids > 0 then cancel_kids(j.id, kids, false, now) end
  return j
end

-- sortie_cancel cancels a pending job, or asks a running one to stop.
-- KEYS[1]: the job's key. ARGV: P, ID, now.
-- Returns the job's hash afterwards, or {'E', 'notfound'}.
local function cancel(keys, argv)
  setup(argv[1])
  local j, e = cancel_job(argv[2], argv[3])
  if not j then return e end
  return row(j)
end

-- delete_job removes job id unless it is running (store.Store.JobDelete),
-- and its P:fid entry (see forget_fid). It returns the job's hash as it
-- was with want_row, else true, and whether the caller must delete the
-- P:fid entry; or nil and the refusal {'E', 'notfound'} / {'E', 'running'}.
local function delete_job(id, now, want_row)
  local j = load_job(id)
  if not j then return nil, { 'E', 'notfound' } end
  if j.st == 'running' then return nil, { 'E', 'running' } end
  local was = true
  if want_row then
    -- The row as it was, with its steps' meta as fields "\1m:<name>".
    was = row(j)
    local sm = redis.call('HGETALL', j.key .. ':sm')
    for i = 1, #sm, 2 do
      was[#was + 1] = '\1m:' .. sm[i]
      was[#was + 1] = sm[i + 1]
    end
  end
  leave(j)
  if PENDING[j.st] then
    release_key(j)
    child_moved(j, -1, now)
  end
  local kids = kids_of(j.key)
  redis.call('DEL', j.key, j.key .. ':cc')
  drop_steps(j.key)
  local forget = forget_fid(j)
  done(j)
  settle(j.id, 'deleted', now, j.hd)
  if #kids > 0 then
    cancel_kids(j.id, kids, true, now)
    free_kids(kids)
  end
  return was, nil, forget
end

-- sortie_delete removes a job that is not running (and its P:fid entry:
-- on a cluster the caller deletes it).
-- KEYS[1]: the job's key. ARGV: P, ID, now.
-- Returns the job's hash as it was, followed by its steps' meta as fields
--   "\1m:<name>", or {'E', 'notfound'} / {'E', 'running'}.
local function delete(keys, argv)
  setup(argv[1])
  local was, e = delete_job(argv[2], argv[3], true)
  if not was then return e end
  return was
end

-- revivable reports whether cancelled job y can wait again: its unique key
-- is free and every dependency still exists.
local function revivable(y)
  if y.u ~= '' and redis.call('HEXISTS', ukey(y.g), y.u) == 1 then return false end
  for _, d in ipairs(deps_of(y)) do
    if redis.call('EXISTS', jkey(d)) == 0 then return false end
  end
  return true
end

-- revive makes the jobs cancelled because of job id wait again, and theirs
-- in turn (store.Store.JobRetry).
local function revive(id, now)
  local stack = { id }
  while #stack > 0 do
    local x = table.remove(stack)
    local cc = jkey(x) .. ':cc'
    for _, s in ipairs(redis.call('SMEMBERS', cc)) do
      local y = load_job(s)
      if not y or y.st ~= 'cancelled' or y.cby ~= x then
        redis.call('SREM', cc, s)
      elseif revivable(y) then
        redis.call('SREM', cc, s)
        leave(y)
        redis.call('HDEL', y.key, 'fa', 'cby', 'wt')
        hold_key(y)
        child_moved(y, 1, now)
        if wait_for(y) > 0 then
          enter(y, 'waiting')
        else
          ready(y, now)
        end
        stack[#stack + 1] = y.id
      end
    end
  end
end

-- retry_job runs job id again (store.Store.JobRetry). It returns the job,
-- or nil and the refusal {'E', 'notfound'}, {'E', 'running'} or
-- {'E', 'unique', key, holder ID}.
local function retry_job(id, now)
  local j = load_job(id)
  if not j then return nil, { 'E', 'notfound' } end
  if j.st == 'running' then return nil, { 'E', 'running' } end
  if j.st == 'available' or j.st == 'waiting' then return j end
  if FINISHED[j.st] then
    if j.u ~= '' then
      local h = redis.call('HGET', ukey(j.g), j.u)
      if h then return nil, { 'E', 'unique', j.u, h } end
    end
    leave(j)
    redis.call('HDEL', j.key, 'fa', 'cby')
    hold_key(j)
    child_moved(j, 1, now)
  else
    leave(j)
  end
  if j.a >= j.ma then
    j.ma = j.a + 1
    redis.call('HSET', j.key, 'ma', j.ma)
  end
  local f = keep_created(j, { 'ra', now, 'wt', '' })
  redis.call('HSET', j.key, unpack(f))
  j.ra = now
  if j.d ~= '' and wait_for(j) > 0 then
    enter(j, 'waiting')
  else
    enter(j, 'available')
    note_queue(j, now)
  end
  revive(j.id, now)
  return j
end

-- sortie_retry runs a job again (store.Store.JobRetry).
-- KEYS[1]: the job's key. ARGV: P, ID, now.
-- Returns the job's hash afterwards, or {'E', 'notfound'}, {'E', 'running'},
-- {'E', 'unique', key, holder ID}.
local function retry(keys, argv)
  setup(argv[1])
  local j, e = retry_job(argv[2], argv[3])
  if not j then return e end
  return row(j)
end

-- The actions of sortie_act, and the most jobs one call takes
-- (store.MaxActMany).
local ACTIONS = { retry = retry_job, cancel = cancel_job, delete = delete_job }
local ACT_MAX = {{ACT_MAX}}

-- sortie_act applies an operator's action to many jobs, in order, as that
-- many calls of sortie_retry, sortie_cancel or sortie_delete would one
-- after the other (store.Store.JobActMany). On Redis Cluster the jobs are
-- of one key group, KEYS[1]'s.
-- KEYS[1]: the first job's key in the jobs' group (which on a cluster names
--   the group the call works in).
-- ARGV: P, action ('retry', 'cancel' or 'delete'), now, n (at most
--   ACT_MAX), then n IDs.
-- Returns per job, in order: 1 when the action applied (2 for a deleted
-- job whose P:fid entry the caller must delete, on a cluster), or its
-- refusal {'E', code, ...} as the single function returns it.
local function act(keys, argv)
  setup(argv[1])
  local fn, now, n = ACTIONS[argv[2]], argv[3], tonumber(argv[4])
  if not fn or not n or n > ACT_MAX or #argv ~= 4 + n then
    return redis.error_reply('sortie_act: want an action and at most ' .. ACT_MAX .. ' IDs')
  end
  local out = {}
  for i = 1, n do
    local j, e, forget = fn(argv[4 + i], now)
    if not j then
      out[i] = e
    elseif forget then
      out[i] = 2
    else
      out[i] = 1
    end
  end
  return out
end

-- sortie_prune deletes up to limit finished jobs of one queue finalized
-- before the cutoffs, oldest first within each state's sorted set and
-- list (see the finished sets).
-- KEYS[1]: the queue's key QP cfg (routing only).
-- ARGV: P, queue, group, now, limit, cutoff for completed, cancelled, dead
--   ('0' prunes none of that state), then optionally '1': list the
--   imported jobs deleted that P:fid records.
-- Returns the number of jobs deleted; with the list, {number, ID...}: on
--   a cluster the IDs of deleted jobs for the caller to delete from P:fid
--   (another slot), on one server none (done here).
local function prune(keys, argv)
  setup(argv[1])
  local q, g, now, limit = argv[2], argv[3], argv[4], tonumber(argv[5])
  local qp = qpre(g, q)
  local n = 0
  local gone = {}
  local function drop(j)
    leave(j)
    local kids = kids_of(j.key)
    redis.call('DEL', j.key, j.key .. ':cc')
    drop_steps(j.key)
    if forget_fid(j) then gone[#gone + 1] = j.id end
    settle(j.id, 'deleted', now, j.hd)
    if #kids > 0 then free_kids(kids) end
    n = n + 1
  end
  for i, st in ipairs({ 'completed', 'cancelled', 'dead' }) do
    local cut = argv[5 + i]
    if cut ~= '0' and n < limit then
      flush()
      for _, s in ipairs(redis.call('ZRANGEBYSCORE', qp .. 'f:' .. st, '-inf', '(' .. cut, 'LIMIT', 0, limit - n)) do
        drop(load_job(s, g))
      end
      -- Then the list's front, oldest first: a member whose job is gone
      -- or finished again since is stale (see the finished sets), and
      -- dropped, up to limit of them a call.
      local key, stale = qp .. 'F:' .. st, 0
      while n < limit and stale < limit do
        local m = redis.call('LINDEX', key, 0)
        if not m or string.sub(m, 1, 18) >= cut then break end
        local j = load_job(string.sub(m, 19), g)
        if j and j.st == st and j.fa == string.sub(m, 1, 18) then
          drop(j)
        else
          redis.call('LPOP', key)
          stale = stale + 1
        end
      end
    end
  end
  if argv[9] ~= '1' then return n end
  table.insert(gone, 1, n)
  return gone
end

-- sortie_history_prune deletes up to limit history counts of one queue of
-- minutes before a time, oldest minutes first.
-- KEYS[1]: the queue's minutes QP hm.
-- ARGV: P, queue, group, before (time argument), limit.
-- Returns the number of counts (hash fields) deleted.
local function history_prune(keys, argv)
  setup(argv[1])
  local qp = qpre(argv[3], argv[2])
  local limit = tonumber(argv[5])
  local n = 0
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', qp .. 'hm', '-inf', '(' .. argv[4], 'LIMIT', 0, limit)) do
    for _, o in ipairs(OUTCOMES) do
      if n >= limit then return n end
      n = n + redis.call('HDEL', qp .. 'hc', m .. ':' .. o)
    end
    redis.call('ZREM', qp .. 'hm', m)
  end
  return n
end

-- Import. -----------------------------------------------------------------

-- parse_imports reads the jobs of sortie_import's arguments from ARGV[b]:
-- per job ID, group, n, then n field, value pairs of its hash.
local function parse_imports(argv, b, n)
  local jobs = {}
  for i = 1, n do
    local np = tonumber(argv[b + 2])
    local f, hf, steps = {}, {}, {}
    for k = b + 3, b + 1 + 2 * np, 2 do
      local name = argv[k]
      if string.byte(name, 1) == 1 then
        -- A step's field (see import_steps): "\1" kind of field ':' name.
        steps[#steps + 1] = { string.sub(name, 2, 2), string.sub(name, 4), argv[k + 1] }
      else
        f[name] = argv[k + 1]
        hf[#hf + 1] = name
        hf[#hf + 1] = argv[k + 1]
      end
    end
    local id, g = argv[b], argv[b + 1]
    jobs[i] = {
      id = id, g = g, key = jkey(id, g), q = f.q, k = f.k, st = f.st, p = f.p or '2', ra = f.ra, pk = f.pk or '',
      u = f.u or '', d = f.d or '', idf = f.idf == '1', lu = f.lu, fa = f.fa, cby = f.cby or '',
      par = f.par or '', ss = f.ss or '', wt = f.wt or '', qp = qpre(g, f.q), hf = hf, steps = steps,
    }
    b = b + 3 + 2 * np
  end
  return jobs
end

-- import_conflicts returns the jobs whose ID is taken (in their group;
-- on one server also where their ID or P:fid points) or whose unique key
-- a pending job holds: index, 'id', '' or index, 'unique', holder ID.
local function import_conflicts(jobs)
  local out = {}
  for i, j in ipairs(jobs) do
    local taken = redis.call('EXISTS', j.key) == 1
    if not taken and not CLUSTER then
      for _, g in ipairs({ natural_group(j.id), gof(j.id) }) do
        if g ~= j.g and redis.call('EXISTS', jkey(j.id, g)) == 1 then taken = true end
      end
    end
    local holder = nil
    if not taken and j.u ~= '' and PENDING[j.st] then holder = redis.call('HGET', ukey(j.g), j.u) end
    if taken then
      out[#out + 1] = i; out[#out + 1] = 'id'; out[#out + 1] = ''
    elseif holder then
      out[#out + 1] = i; out[#out + 1] = 'unique'; out[#out + 1] = holder
    end
  end
  return out
end

-- import_place puts imported job j, in state st, where that state's jobs
-- are: the running set by lease (and its partition's running count), or
-- its state's ID index and the lane, the due set or the finished set.
local function import_place(j, st)
  if st == 'running' then
    defer('ZADD', j.qp .. 'r', j.lu, j.id)
    if j.pk ~= '' then redis.call('HINCRBY', j.qp .. 'prun', j.pk, 1) end
    return
  end
  index_defer('IADD', j.qp, st, j.id)
  if st == 'available' then
    lane_push(j)
    note_queue(j)
  elseif st == 'scheduled' or st == 'retrying' then
    defer('ZADD', j.qp .. 's', j.ra, j.id)
    note_queue(j)
  elseif FINISHED[st] and not held(j) then
    fin_push(j.qp, st, j.fa, j.id)
  end
end

-- import_steps writes imported job j's steps: its fields "\1m:<name>"
-- (meta, see step_meta), "\1r:<name>" (result) and "\1c:<name>"
-- (children). A spawn step's pending count is that of its children the
-- store holds that are pending; each child imported later counts itself
-- (import_job).
local function import_steps(j)
  local hk = { m = ':sm', r = ':sr', c = ':sc' }
  local kids = {}
  for _, e in ipairs(j.steps) do
    redis.call('HSET', j.key .. hk[e[1]], e[2], e[3])
    if e[1] == 'c' then kids[e[2]] = e[3] end
  end
  for name, csv in pairs(kids) do
    local n = 0
    for c in string.gmatch(csv, '[^,]+') do
      local st = redis.call('HGET', jkey(c), 'st')
      if st and PENDING[st] then n = n + 1 end
    end
    local s = step_meta(j.key, name)
    s.pending = n
    redis.call('HSET', j.key .. ':sm', name, step_encode(s))
  end
end

-- import_release makes imported job id available when it waits at an
-- Await whose children are all in the store and none pending
-- (store.Store.JobImport).
local function import_release(id, now)
  local p = load_job(id)
  if not p or p.st ~= 'waiting' or p.wt == '' then return end
  local s = step_meta(p.key, p.wt)
  if not s or s.pending > 0 then return end
  for c in string.gmatch(redis.call('HGET', p.key .. ':sc', p.wt) or '', '[^,]+') do
    if redis.call('EXISTS', jkey(c)) == 0 then return end
  end
  leave(p)
  redis.call('HDEL', p.key, 'wt')
  enter(p, 'available')
  note_queue(p, now)
end

-- import_job writes job j's hash (ARGV[j.from..j.to]) and everything its
-- state holds. A waiting job waits for the dependencies that hold it back
-- (wait_for); when none does it is ready, available or scheduled by its
-- RunAt (store.ImportState). A pending job holds its unique key; a job
-- cancelled by a dependency's ending is recorded with that dependency,
-- when it exists, so that its retry revives the job.
local function import_job(argv, j, now)
  redis.call('HSET', j.key, unpack(j.hf))
  if not CLUSTER and is_new(j.id) then redis.call('HSET', j.key, 'g', j.g) end
  if #j.steps > 0 then import_steps(j) end
  local st = j.st
  if st == 'waiting' and j.wt == '' and wait_for(j) == 0 then
    if j.ra > now then st = 'scheduled' else st = 'available' end
    redis.call('HSET', j.key, 'st', st)
  end
  j.st = st
  import_place(j, st)
  if PENDING[st] then hold_key(j) end
  if j.cby ~= '' and redis.call('EXISTS', jkey(j.cby)) == 1 then
    redis.call('SADD', jkey(j.cby) .. ':cc', j.id)
  end
  if j.par ~= '' and PENDING[st] then child_moved(j, 1, now) end
end

-- sortie_import writes jobs exported from a store, as they were, all or
-- none (store.Store.JobImport). The caller checked them (store.ImportValidate,
-- IDs present, unique keys held), raised P:seq past their IDs, and wrote
-- P:fid for those whose ID gives another group; this call checks again
-- what may have changed since, in its slot (IDs, unique keys), and
-- writes nothing if any is taken.
-- KEYS[1]: the group's claim token counter P:{g}:tok (on a cluster every
--   job of the call is in group g).
-- ARGV: P, now, the largest claim token of the import, n, then n jobs:
--   ID, group, number of pairs, then the field, value pairs of the job's
--   hash as the store's transitions leave it in the job's exported state
--   (see load_job; the attempt of a running job is the attempts before
--   its current one), in increasing ID order: a job's dependencies come
--   before it.
-- Returns {n written}, or {'E', 'conflict', then per job taken: index (from
--   1), 'id' or 'unique', holder ID or ''}, having written nothing.
local function import(keys, argv)
  setup(argv[1])
  local now, tok = argv[2], tonumber(argv[3])
  local jobs = parse_imports(argv, 5, tonumber(argv[4]))
  local taken = import_conflicts(jobs)
  if #taken > 0 then
    table.insert(taken, 1, 'conflict')
    table.insert(taken, 1, 'E')
    return taken
  end
  local queues, groups, awaits = {}, {}, {}
  for _, j in ipairs(jobs) do
    import_job(argv, j, now)
    if j.wt ~= '' and j.st == 'waiting' then awaits[#awaits + 1] = j.id end
    if j.par ~= '' then awaits[#awaits + 1] = j.par end
    if not CLUSTER and not queues[j.q] then
      queues[j.q] = true
      redis.call('SADD', P .. ':queues', j.q)
    end
    if not groups[j.g] then
      groups[j.g] = true
      local tk = P .. ':{' .. j.g .. '}:tok'
      if num(redis.call('GET', tk)) < tok then redis.call('SET', tk, argv[3]) end
    end
  end
  for _, id in ipairs(awaits) do import_release(id, now) end
  return { #jobs }
end

-- sortie_seq_raise raises P:seq, the last job ID handed out, to at least
-- a value, so that the IDs handed out next come after imported ones.
-- KEYS[1]: P:seq. ARGV: P, the value (a job ID).
-- Returns P:seq's value afterwards.
local function seq_raise(keys, argv)
  setup(argv[1])
  local cur = num(redis.call('GET', keys[1]))
  if cur > 0 and cur < NEW_ID then cur = cur * GROUPS + GROUPS - 1 end
  local want = tonumber(argv[2])
  if cur < want then cur = want end
  redis.call('SET', keys[1], string.format('%d', cur))
  return string.format('%d', cur)
end

-- sortie_ids hands out job IDs (new_ids), for the caller to pass to
-- sortie_enqueue or sortie_periodic as their base: on Redis Cluster,
-- where P:seq is on another slot than the jobs.
-- KEYS[1]: P:seq. ARGV: P, how many.
-- Returns the first ID, as a string.
local function ids(keys, argv)
  setup(argv[1])
  return string.format('%d', new_ids(tonumber(argv[2])))
end

-- Queues and schedules. ---------------------------------------------------

-- sortie_configure replaces a queue's settings.
-- KEYS[1]: QP cfg. ARGV: P, queue, group, now, then the settings: max
--   running, rate limit, rate period (µs), partition max running,
--   partition rate limit, partition rate period (µs), max depth, overflow.
-- Returns the queue's cfg hash.
local function configure(keys, argv)
  setup(argv[1])
  local q, g, now = argv[2], argv[3], argv[4]
  local qp = qpre(g, q)
  redis.call('HSET', qp .. 'cfg', 'mr', argv[5], 'rl', argv[6], 'rp', argv[7], 'pmr', argv[8], 'prl', argv[9],
    'prp', argv[10], 'md', argv[11], 'ov', argv[12], 'set', '1', 'ua', now)
  if argv[6] == '0' then redis.call('DEL', qp .. 'rate') end
  if not CLUSTER then redis.call('SADD', P .. ':queues', q) end
  note(g, q, now)
  return redis.call('HGETALL', qp .. 'cfg')
end

-- sortie_pause pauses or resumes a queue for every process.
-- KEYS[1]: QP cfg. ARGV: P, queue, group, now, paused (0/1).
-- Returns the queue's cfg hash.
local function pause(keys, argv)
  setup(argv[1])
  local q, g, now = argv[2], argv[3], argv[4]
  local qp = qpre(g, q)
  redis.call('HSET', qp .. 'cfg', 'paused', argv[5], 'ua', now)
  if not CLUSTER then redis.call('SADD', P .. ':queues', q) end
  if argv[5] == '0' then note(g, q, now) end
  return redis.call('HGETALL', qp .. 'cfg')
end

-- sortie_periodic moves a schedule's last slot from one time to another
-- and enqueues its jobs, in one step, only if the last slot is still the
-- first time.
-- KEYS[1]: the schedules' hash (P:periodic; on a cluster P:{g}:periodic
--   of the jobs' key group), with its updated-at hash at KEYS[1]:at.
-- ARGV: P, name, from ('0': never advanced), to,
--   then one batch as sortie_enqueue takes it (from its now on).
-- Returns {1, results of the enqueue...} when applied, {0, last} when not,
-- or an enqueue error.
local function periodic(keys, argv)
  setup(argv[1])
  local name, from, to = argv[2], argv[3], argv[4]
  local last = redis.call('HGET', keys[1], name) or '0'
  if last ~= from then return { 0, last } end
  local out = enqueue_one(argv, 5)
  if out[1] == 'E' then return out end
  redis.call('HSET', keys[1], name, to)
  redis.call('HSET', keys[1] .. ':at', name, argv[5])
  table.insert(out, 1, 1)
  return out
end

-- Processes. ---------------------------------------------------------------

-- The registry of client processes lives under one hash tag, {procs}:
-- data (hash: ID -> what the process sent, store.EncodeProcess), beat
-- (sorted set: ID by last beat, microseconds) and cmd (hash: ID -> 'q',
-- 's' or 'qs', the commands requested). A few entries, read whole.
local FORGET_MAX = 100

local function proc_keys(k)
  return k, string.sub(k, 1, -5) .. 'beat', string.sub(k, 1, -5) .. 'cmd'
end

local function proc_forget(data, beat, cmd, id)
  redis.call('HDEL', data, id)
  redis.call('ZREM', beat, id)
  redis.call('HDEL', cmd, id)
end

-- sortie_process_beat records a beat and forgets processes silent since
-- ForgetBefore, at most FORGET_MAX a call.
-- KEYS[1]: P:{procs}:data.
-- ARGV: P, ID, data, now, ForgetBefore ('0': none), all times in
--   microseconds.
-- Returns the process's commands: '', 'q', 's' or 'qs'.
local function process_beat(keys, argv)
  setup(argv[1])
  local data, beat, cmd = proc_keys(keys[1])
  local id = argv[2]
  redis.call('HSET', data, id, argv[3])
  redis.call('ZADD', beat, argv[4], id)
  if argv[5] ~= '0' then
    for _, old in ipairs(redis.call('ZRANGE', beat, '-inf', '(' .. argv[5], 'BYSCORE', 'LIMIT', 0, FORGET_MAX)) do
      if old ~= id then proc_forget(data, beat, cmd, old) end
    end
  end
  return redis.call('HGET', cmd, id) or ''
end

-- sortie_process_command adds a command to a process's.
-- KEYS[1]: P:{procs}:data.
-- ARGV: P, ID, command ('q' or 's').
-- Returns {data, last beat, commands}, or nil for an unknown process.
local function process_command(keys, argv)
  setup(argv[1])
  local data, beat, cmd = proc_keys(keys[1])
  local id = argv[2]
  local d = redis.call('HGET', data, id)
  if not d then return nil end
  local c = redis.call('HGET', cmd, id) or ''
  if not string.find(c, argv[3], 1, true) then
    c = c .. argv[3]
    if c == 'sq' then c = 'qs' end
    redis.call('HSET', cmd, id, c)
  end
  return { d, redis.call('ZSCORE', beat, id), c }
end

-- sortie_process_delete deletes a process's entries.
-- KEYS[1]: P:{procs}:data.
-- ARGV: P, ID.
local function process_delete(keys, argv)
  setup(argv[1])
  local data, beat, cmd = proc_keys(keys[1])
  proc_forget(data, beat, cmd, argv[2])
  return 1
end

-- Durable steps. -----------------------------------------------------------

-- claimed returns job id of group g if it is running under claim token
-- tok, else nil.
local function claimed(id, g, tok)
  local j = load_job(id, g)
  if not j or j.st ~= 'running' or j.tok ~= tok then return nil end
  return j
end

-- suspend ends running job j's attempt without counting it: j enters
-- state st at RunAt ra, waiting at step name (wt), its lease cleared.
local function suspend(j, st, ra, name, now)
  leave(j)
  local f = keep_created(j, { 'lu', '', 'a', astr(j.a - 1), 'ra', ra, 'wt', name })
  j.ra = ra
  enter(j, st, now, f)
  note_queue(j, now)
end

-- sortie_step_record records steps of running attempts (StepRun), each
-- only if its job is running with the step's claim token (fencing).
-- KEYS[1]: the first step's job key (routing only).
-- ARGV: P, now, n, then n steps of 5 values: ID, its group, claim token,
--   name, JSON result.
-- Returns per step: 0 refused (stale claim), 1 recorded, 2 the job had
--   a step of that name (kept, nothing recorded).
local function step_record(keys, argv)
  setup(argv[1])
  local now, n = argv[2], tonumber(argv[3])
  local out = {}
  for i = 1, n do
    local b = 4 + (i - 1) * 5
    local id, g, name = argv[b], argv[b + 1], argv[b + 3]
    local key = jkey(id, g)
    local v = redis.call('HMGET', key, 'st', 'tok', 'a')
    if v[1] ~= 'running' or v[2] ~= argv[b + 2] then
      out[i] = 0
    elseif step_add(key, name, { kind = 'step', a = astr(num(v[3]) + 1), at = now, un = '0', n = astr(#argv[b + 4]), pending = 0 }) then
      redis.call('HSET', key .. ':sr', name, argv[b + 4])
      out[i] = 1
    else
      out[i] = 2
    end
  end
  return out
end

-- step_of returns job j's step name, or nil; a step of another kind than
-- want is the refusal {'E', 'kind', its kind}.
local function step_of(j, name, want)
  local s = step_meta(j.key, name)
  if s and s.kind ~= want then return nil, { 'E', 'kind', s.kind } end
  return s
end

-- sortie_step_sleep ends a running attempt at a durable sleep
-- (store.Store.StepSleep).
-- KEYS[1]: the job's key. ARGV: P, ID, group, claim token, name, wake
--   time, now.
-- Returns {applied (0/1), exists (0/1), cancel requested (0/1), state
--   after ('' when unchanged)}, or {'E', 'kind', kind} for a step of
--   that name of another kind.
local function step_sleep(keys, argv)
  setup(argv[1])
  local name, un, now = argv[5], argv[6], argv[7]
  local j = claimed(argv[2], argv[3], argv[4])
  if not j then return { 0, 0, 0, '' } end
  if j.cr then return { 1, 0, 1, '' } end
  local s, e = step_of(j, name, 'sleep')
  if e then return e end
  local exists = 0
  if s then
    un, exists = s.un, 1
  else
    step_add(j.key, name, { kind = 'sleep', a = astr(j.a), at = now, un = un, n = '0', pending = 0 })
  end
  local st = 'available'
  if un > now then st = 'scheduled' end
  suspend(j, st, un, name, now)
  return { 1, exists, 0, st }
end

-- sortie_step_await ends a running attempt until the children of its
-- spawn step have finished, unless none is pending
-- (store.Store.StepAwait).
-- KEYS[1]: the job's key. ARGV: P, ID, group, claim token, name, now.
-- Returns {applied, 0, cancel requested, state after ('' when
--   unchanged)}, or {'E', 'nospawn'} when the job has no spawn step of
--   that name.
local function step_await(keys, argv)
  setup(argv[1])
  local name, now = argv[5], argv[6]
  local j = claimed(argv[2], argv[3], argv[4])
  if not j then return { 0, 0, 0, '' } end
  if j.cr then return { 1, 0, 1, '' } end
  local s = step_meta(j.key, name)
  if not s or s.kind ~= 'spawn' then return { 'E', 'nospawn' } end
  if s.pending <= 0 then return { 1, 0, 0, '' } end
  suspend(j, 'waiting', now, name, now)
  return { 1, 0, 0, 'waiting' }
end

-- sortie_step_spawn enqueues the children of a running job once and
-- records them as its spawn step (store.Store.StepSpawn). On a cluster
-- the children are in the parent's key group.
-- KEYS[1]: the parent's key. ARGV: P, ID, group, claim token, name,
--   cancel with parent (0/1), then one batch as sortie_enqueue takes it
--   (now, workflow, n, sequence base, n jobs).
-- Returns {applied (0/1), exists (0/1), children's IDs comma-separated},
--   or {'E', 'kind', kind} for a step of that name of another kind, or a
--   batch refusal as sortie_enqueue returns it.
local function step_spawn(keys, argv)
  setup(argv[1])
  local name = argv[5]
  local j = claimed(argv[2], argv[3], argv[4])
  if not j then return { 0, 0, '' } end
  local s, e = step_of(j, name, 'spawn')
  if e then return e end
  if s then return { 1, 1, redis.call('HGET', j.key .. ':sc', name) or '' } end
  local b = 7
  local now, n = argv[b], tonumber(argv[b + 2])
  local jobs = parse_jobs(argv, b + 4, n)
  local err = check_batch(jobs, now)
  if err then return err end
  SPAWN = { par = j.id, ss = name, cwp = argv[6] == '1' }
  local out = insert_batch(jobs, now, false, argv[b + 3])
  SPAWN = nil
  local ids, pending = {}, 0
  for i = 1, #out, 3 do
    ids[#ids + 1] = out[i]
    if PENDING[out[i + 2]] then pending = pending + 1 end
  end
  local csv = table.concat(ids, ',')
  step_add(j.key, name, { kind = 'spawn', a = astr(j.a), at = now, un = '0', n = astr(#ids), pending = pending })
  redis.call('HSET', j.key .. ':sc', name, csv)
  return { 1, 0, csv }
end

-- Indexes. ------------------------------------------------------------------

local indexes = {}
do
  -- sortie_index_range lists an ID index (see index_range).
  -- KEYS[1]: the index, QP i:<state>.
  -- ARGV: cursor (an ID, '0' for none), desc (0/1), most IDs to return.
  -- Returns the IDs in order (from the last down with desc).
  function indexes.list(keys, argv)
    return index_range(keys[1], argv[1], argv[2] == '1', tonumber(argv[3]))
  end

  -- MIGRATE_MAX is the most IDs one call of sortie_index_migrate moves.
  local MIGRATE_MAX = 1000
  local INDEXED = { 'waiting', 'scheduled', 'available', 'retrying', 'completed', 'cancelled', 'dead' }

  -- sortie_index_migrate moves up to MIGRATE_MAX IDs of a queue's ID
  -- indexes of library versions before 13 (QP x:<state>, one zset each)
  -- into its bucketed indexes, leaving out the IDs of jobs gone or in
  -- another state since.
  -- KEYS[1]: the queue's QP cfg (routing only).
  -- ARGV: P, queue, group.
  -- Returns how many IDs those zsets still hold.
  function indexes.migrate(keys, argv)
    setup(argv[1])
    local qp, g = qpre(argv[3], argv[2]), argv[3]
    local left, room = 0, MIGRATE_MAX
    for _, st in ipairs(INDEXED) do
      local old = qp .. 'x:' .. st
      if room > 0 then
        local ids = redis.call('ZRANGE', old, 0, room - 1)
        for _, id in ipairs(ids) do
          if redis.call('HGET', jkey(id, g), 'st') == st then index_defer('IADD', qp, st, id) end
        end
        if #ids > 0 then redis.call('ZREMRANGEBYRANK', old, 0, #ids - 1) end
        room = room - #ids
      end
      left = left + redis.call('ZCARD', old)
    end
    return left
  end
end

-- register registers fn under name: every call starts with nothing
-- deferred, and ends by flushing its writes and sending its notifications.
local function register(name, fn, flags)
  -- The only flags given are FREES (below).
  local frees = flags ~= nil
  redis.register_function { function_name = name, flags = flags, callback = function(keys, argv)
    -- A call that failed may have left some behind.
    if #pend_keys > 0 or #lane_order > 0 or #fin_order > 0 then
      pend, pend_keys, lane_adds, lane_order, index_meta, fin_adds, fin_order = {}, {}, {}, {}, {}, {}, {}
    end
    if next(notes) ~= nil or #done_order > 0 then notes, dones, done_order = {}, {}, {} end
    if #hist_order > 0 then hist, hist_order = {}, {} end
    waits.begin()
    SPAWN = nil
    CG, fids = string.match(keys[1] or '', '{(%d+)}'), nil
    local out = fn(keys, argv)
    flush()
    if next(notes) ~= nil then
      waits.hand_all(frees)
      flush()
    end
    flush_history()
    send_notes()
    return out
  end }
end

-- FREES is the flag of the functions that only delete or shrink: Redis
-- runs them when it is out of memory (maxmemory reached, noeviction),
-- so that sortie can always free a full server. Their writes beyond the
-- deletions are a few small fields and set members per job.
local FREES = { 'allow-oom' }

-- release is sortie_finish for reports that all release their jobs (put
-- them back, attempt not counted: a stopping worker's), run under OOM.
local function release_fields(keys, argv, fields)
  local n = tonumber(argv[3])
  for i = 1, n do
    if argv[4 + (i - 1) * fields + 3] ~= RELEASED then
      return redis.error_reply('sortie_release: report ' .. i .. ' does not release its job')
    end
  end
  return finish_fields(keys, argv, fields)
end

local function release(keys, argv) return release_fields(keys, argv, REPORT_FIELDS) end
local function release_u(keys, argv) return release_fields(keys, argv, REPORT_FIELDS_U) end

-- act_free is sortie_act for the actions that free (cancel, delete), run
-- under OOM.
local function act_free(keys, argv)
  if argv[2] ~= 'cancel' and argv[2] ~= 'delete' then
    return redis.error_reply('sortie_act_free: want cancel or delete')
  end
  return act(keys, argv)
end

redis.register_function { function_name = 'sortie_version', callback = function() return LIB_VERSION end, flags = { 'no-writes' } }
register('sortie_enqueue', enqueue)
register('sortie_add', add)
register('sortie_fetch', fetch)
register('sortie_fetch_rows', fetch_rows)
register('sortie_claim', claim)
register('sortie_claim_wait', waits.claim)
register('sortie_unwait', waits.unwait, FREES)
register('sortie_finish', finish)
register('sortie_finish_u', finish_u)
register('sortie_complete', complete_all)
register('sortie_extend', extend)
register('sortie_rescue', rescue)
register('sortie_cancel', cancel, FREES)
register('sortie_delete', delete, FREES)
register('sortie_retry', retry)
register('sortie_act', act)
register('sortie_prune', prune, FREES)
register('sortie_release', release, FREES)
register('sortie_release_u', release_u, FREES)
register('sortie_act_free', act_free, FREES)
register('sortie_configure', configure)
register('sortie_pause', pause)
register('sortie_periodic', periodic)
register('sortie_process_beat', process_beat)
register('sortie_process_command', process_command)
register('sortie_process_delete', process_delete, FREES)
register('sortie_history_prune', history_prune, FREES)
register('sortie_import', import)
register('sortie_seq_raise', seq_raise)
register('sortie_ids', ids)
register('sortie_step_record', step_record)
register('sortie_step_sleep', step_sleep)
register('sortie_step_await', step_await)
register('sortie_step_spawn', step_spawn)
register('sortie_index_migrate', indexes.migrate, FREES)
redis.register_function { function_name = 'sortie_index_range', callback = indexes.list, flags = { 'no-writes' } }
