#!lua name=sortie
--[[
sortie's Functions library: every state change of a job is one call to one
function below, run atomically by the server. redisstore (Go) loads it at
start (FUNCTION LOAD), checks its version, and calls it with FCALL.

Conventions, shared by every function:

  * ARGV[1] is the key prefix P of the store; every key is built from it.
  * Times are integers of microseconds since the Unix epoch, as decimal
    strings. They come from the caller's params (the store's callers read
    one clock, which tests can move), never from the server's.
  * A queue q lives in group g = a number from 0 to 16383 that the Go side
    derives from q's name; every key of the queue and of its jobs carries
    the hash tag {g}, so on Redis Cluster a queue and its jobs live on one
    slot and a function touching one queue stays on one slot. A job's ID is
    seq*16384 + g, so the job's keys follow from its ID alone:
      P:{g}:j:<id>          hash: the job (fields listed at load_job)
      P:{g}:j:<id>:dn       set: waiting jobs that depend on this one
      P:{g}:j:<id>:cc       set: jobs cancelled because this one ended badly
      P:{g}:tok             string: the group's last claim token
      P:{g}:w:<qlen>:<q>    shard channel: "jobs of q may be available"
      P:{g}:done            shard channel: IDs of jobs that just finished
    and per queue, under QP = P:{g}:q<len(q)>:<q>: (length-prefixed, so no
    queue name can reach another's keys):
      QP h                  zset (score 0, by member): the head of every
                            non-empty lane: lexkey .. laneid
      QP l:<laneid>         zset (score 0, by member): a lane's available
                            jobs, laneid = priority kind \0 partition key,
                            member lexkey = priority (1 digit), RunAt (18
                            digits), ID (16 digits), so member order is
                            claim order (Priority, RunAt, ID)
      QP s                  zset by RunAt: scheduled and retrying jobs
      QP r                  zset by LeaseUntil: running jobs (ZCARD is the
                            running count; rescue reads the expired range)
      QP x:<state>          zset by ID, one per state: the state's jobs in
                            ID order (listing), ZCARD = the state's count
      QP f:<state>          zset by FinalizedAt, for completed, cancelled
                            and dead: what pruning reads, oldest first
      QP cfg                hash: settings, paused, dropped, updated
      QP rate               zset by start time: the queue's recent starts
      QP pr:<part>          zset by start time: a partition's recent starts
      QP prun               hash: running jobs per partition key
    and store-wide:
      P:seq                 string: the last job sequence number handed out
      P:queues              set: every queue ever used
      P:u                   hash: unique key -> ID of its pending holder
      P:periodic            hash: schedule name -> last slot
      P:periodic:at         hash: schedule name -> updated at
  * Errors the caller must map to the store's errors come back as a table
    {'E', code, ...}; anything else a function cannot do is a script error
    (redis.error_reply), never swallowed.
  * Every loop is bounded: by the batch the caller sent, by a limit in the
    arguments, or by the jobs one workflow links together (a dependency
    cascade visits each job of the graph at most once).
]]

local LIB_VERSION = {{VERSION}}
local MSG_DEP_ENDED = {{MSG_DEP_ENDED}}       -- format: dep ID, state
local MSG_DEP_DELETED = {{MSG_DEP_DELETED}}   -- format: dep ID
local MSG_DROPPED = {{MSG_DROPPED}}           -- format: queue, max depth
local MSG_NO_ERROR = {{MSG_NO_ERROR}}
local MSG_LEASE_LOST = {{MSG_LEASE_LOST}}
local PROMOTE_MAX = 1000   -- due scheduled jobs moved to their lanes per fetch
local SKIP_MAX = 1000      -- lanes a fetch may pass over (other kinds, full partitions)

local GROUPS = 16384
local P = ''

local function fmt(n) return string.format('%.0f', n) end
local function grp(id) return math.fmod(id, GROUPS) end
local function jkey(id) return P .. ':{' .. fmt(grp(id)) .. '}:j:' .. fmt(id) end
local function qpre(g, q) return P .. ':{' .. fmt(g) .. '}:q' .. #q .. ':' .. q .. ':' end
local function wchan(g, q) return P .. ':{' .. fmt(g) .. '}:w:' .. #q .. ':' .. q end
local function lexkey(prio, runat, id) return string.format('%d%018.0f%016.0f', prio, runat, id) end

local PENDING = { waiting = true, scheduled = true, available = true, running = true, retrying = true }
local FINISHED = { completed = true, cancelled = true, dead = true }
local QUEUED = { waiting = true, scheduled = true, available = true, retrying = true }

-- load_job returns the job fields the functions work with, or nil.
-- Fields of the hash: q queue, k kind, st state, p priority, a attempt,
-- ma max attempts, ra RunAt, ca CreatedAt, ata AttemptedAt, atb
-- AttemptedBy, fa FinalizedAt, lu LeaseUntil, tok claim token, u unique
-- key, pk partition key, e errors (JSON lines), args, x (tags, meta,
-- timeout: opaque here), res result, hr has result, pr progress, cr cancel
-- requested, wf workflow ID, d dependency IDs (comma-separated), idf
-- ignore dependency failure, wn dependencies still holding the job back,
-- cby the dependency whose ending cancelled the job.
local function load_job(id)
  local k = jkey(id)
  local v = redis.call('HMGET', k, 'q', 'k', 'st', 'p', 'a', 'ma', 'ra', 'pk', 'u', 'tok', 'cr', 'd', 'idf', 'wn', 'cby')
  if not v[3] then return nil end
  return {
    id = id, key = k, q = v[1], k = v[2], st = v[3], p = tonumber(v[4]), a = tonumber(v[5]),
    ma = tonumber(v[6]), ra = tonumber(v[7]), pk = v[8] or '', u = v[9] or '', tok = v[10] or '',
    cr = v[11] == '1', d = v[12] or '', idf = v[13] == '1', wn = tonumber(v[14] or '0'), cby = v[15] or '',
    qp = qpre(grp(id), v[1]), g = grp(id),
  }
end

local function deps_of(j)
  local out = {}
  for s in string.gmatch(j.d, '[^,]+') do out[#out + 1] = tonumber(s) end
  return out
end

local function append_error(j, line)
  local old = redis.call('HGET', j.key, 'e')
  if old and old ~= '' then line = old .. '\n' .. line end
  redis.call('HSET', j.key, 'e', line)
end

-- error_line encodes one attempt error as a JSON line (cjson would print
-- the microsecond time with too few digits).
local function error_line(attempt, at, msg, stack)
  local line = '{"a":' .. fmt(attempt) .. ',"t":' .. fmt(at) .. ',"m":' .. cjson.encode(msg)
  if stack and stack ~= '' then line = line .. ',"s":' .. cjson.encode(stack) end
  return line .. '}'
end

-- Lanes. ------------------------------------------------------------------

local function laneid(j) return tostring(j.p) .. j.k .. '\0' .. j.pk end

local function lane_push(j)
  local lid = laneid(j)
  local l = j.qp .. 'l:' .. lid
  local lk = lexkey(j.p, j.ra, j.id)
  local head = redis.call('ZRANGE', l, 0, 0)[1]
  redis.call('ZADD', l, 0, lk)
  if not head then
    redis.call('ZADD', j.qp .. 'h', 0, lk .. lid)
  elseif lk < head then
    redis.call('ZREM', j.qp .. 'h', head .. lid)
    redis.call('ZADD', j.qp .. 'h', 0, lk .. lid)
  end
end

local function lane_remove(j)
  local lid = laneid(j)
  local l = j.qp .. 'l:' .. lid
  local lk = lexkey(j.p, j.ra, j.id)
  local head = redis.call('ZRANGE', l, 0, 0)[1]
  redis.call('ZREM', l, lk)
  if head == lk then
    redis.call('ZREM', j.qp .. 'h', lk .. lid)
    local nh = redis.call('ZRANGE', l, 0, 0)[1]
    if nh then redis.call('ZADD', j.qp .. 'h', 0, nh .. lid) end
  end
end

-- States. -----------------------------------------------------------------

-- leave takes j out of the structures of its current state.
local function leave(j)
  local ids = fmt(j.id)
  local st = j.st
  redis.call('ZREM', j.qp .. 'x:' .. st, ids)
  if st == 'available' then
    lane_remove(j)
  elseif st == 'scheduled' or st == 'retrying' then
    redis.call('ZREM', j.qp .. 's', ids)
  elseif st == 'running' then
    redis.call('ZREM', j.qp .. 'r', ids)
    if j.pk ~= '' then redis.call('HINCRBY', j.qp .. 'prun', j.pk, -1) end
  elseif FINISHED[st] then
    redis.call('ZREM', j.qp .. 'f:' .. st, ids)
  end
end

-- enter puts j into state st: the caller set j.ra (RunAt) for available,
-- scheduled and retrying, and passes the lease for running and the time
-- for finished states.
local function enter(j, st, t)
  local ids = fmt(j.id)
  j.st = st
  redis.call('HSET', j.key, 'st', st)
  redis.call('ZADD', j.qp .. 'x:' .. st, ids, ids)
  if st == 'available' then
    lane_push(j)
  elseif st == 'scheduled' or st == 'retrying' then
    redis.call('ZADD', j.qp .. 's', fmt(j.ra), ids)
  elseif st == 'running' then
    redis.call('ZADD', j.qp .. 'r', fmt(t), ids)
    if j.pk ~= '' then redis.call('HINCRBY', j.qp .. 'prun', j.pk, 1) end
  elseif FINISHED[st] then
    redis.call('ZADD', j.qp .. 'f:' .. st, fmt(t), ids)
    redis.call('HSET', j.key, 'fa', fmt(t))
  end
end

local function hold_key(j)
  if j.u ~= '' then redis.call('HSET', P .. ':u', j.u, fmt(j.id)) end
end

local function release_key(j)
  if j.u ~= '' and redis.call('HGET', P .. ':u', j.u) == fmt(j.id) then
    redis.call('HDEL', P .. ':u', j.u)
  end
end

-- Notifications, sent when the function returns (a set of channels).
local notes = {}
local function note_queue(j) notes[wchan(j.g, j.q)] = true end
local function send_notes()
  for ch in pairs(notes) do redis.call('SPUBLISH', ch, '') end
  notes = {}
end

-- ready makes waiting (or revived) j available, or scheduled when its
-- RunAt is after now.
local function ready(j, now)
  if j.ra > now then enter(j, 'scheduled') else enter(j, 'available') end
  note_queue(j)
end

-- wait_for links j, about to wait, to the dependencies holding it back and
-- returns how many do; a dependency that no longer exists does not.
local function wait_for(j)
  local n = 0
  for _, d in ipairs(deps_of(j)) do
    local st = redis.call('HGET', jkey(d), 'st')
    if st and (PENDING[st] or (FINISHED[st] and st ~= 'completed' and not j.idf)) then
      redis.call('SADD', jkey(d) .. ':dn', fmt(j.id))
      n = n + 1
    end
  end
  redis.call('HSET', j.key, 'wn', n)
  j.wn = n
  return n
end

local function cancelled_by(j, d)
  redis.call('HSET', j.key, 'cby', fmt(d))
  redis.call('SADD', jkey(d) .. ':cc', fmt(j.id))
end

local function done(j)
  redis.call('SPUBLISH', P .. ':{' .. fmt(j.g) .. '}:done', fmt(j.id))
end

-- finalize ends pending j in finished state st at now: leaves its state,
-- releases its unique key, clears its lease and cancel request.
local function finalize(j, st, now)
  leave(j)
  release_key(j)
  redis.call('HDEL', j.key, 'lu', 'cr')
  enter(j, st, now)
  done(j)
end

-- settle handles the waiting dependents of job id, which ended in state st
-- ('deleted' when it was deleted or pruned): a completed dependency (or a
-- failed one the dependent ignores) counts down the dependent's wn and
-- releases it at zero; a failed one cancels it and goes on down the graph.
local function settle(id, st, now)
  local stack = { { id, st } }
  local visits = 0
  while #stack > 0 do
    local e = table.remove(stack)
    local dn = jkey(e[1]) .. ':dn'
    local ids = redis.call('SMEMBERS', dn)
    redis.call('DEL', dn)
    for _, s in ipairs(ids) do
      visits = visits + 1
      local w = load_job(tonumber(s))
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
            msg = string.format(MSG_DEP_DELETED, fmt(e[1]))
          else
            msg = string.format(MSG_DEP_ENDED, fmt(e[1]), e[2])
          end
          append_error(w, error_line(w.a, now, msg))
          finalize(w, 'cancelled', now)
          if e[2] ~= 'deleted' then cancelled_by(w, e[1]) end
          stack[#stack + 1] = { w.id, 'cancelled' }
        end
      end
    end
  end
  return visits
end

-- Row replies: the whole hash of a job, for the Go side to decode.
local function row(id)
  return redis.call('HGETALL', jkey(id))
end

-- Enqueue. ----------------------------------------------------------------

-- A job in the enqueue arguments is JOB_FIELDS values (see sortie_enqueue).
local JOB_FIELDS = 14

local function parse_jobs(argv, from, n)
  local jobs = {}
  for i = 1, n do
    local b = from + (i - 1) * JOB_FIELDS
    jobs[i] = {
      q = argv[b], g = tonumber(argv[b + 1]), k = argv[b + 2], p = tonumber(argv[b + 3]),
      ma = argv[b + 4], ra = tonumber(argv[b + 5]), st = argv[b + 6], u = argv[b + 7],
      pk = argv[b + 8], args = argv[b + 9], x = argv[b + 10], idf = argv[b + 11] == '1',
      dup = tonumber(argv[b + 12]), deps = argv[b + 13],
    }
  end
  return jobs
end

local function queue_cfg(qp)
  local v = redis.call('HMGET', qp .. 'cfg', 'mr', 'rl', 'rp', 'pmr', 'prl', 'prp', 'md', 'ov', 'paused')
  return {
    mr = tonumber(v[1] or '0'), rl = tonumber(v[2] or '0'), rp = tonumber(v[3] or '0'),
    pmr = tonumber(v[4] or '0'), prl = tonumber(v[5] or '0'), prp = tonumber(v[6] or '0'),
    md = tonumber(v[7] or '0'), ov = tonumber(v[8] or '0'), paused = v[9] == '1',
  }
end

local function queued_count(qp)
  local n = 0
  for st in pairs(QUEUED) do n = n + redis.call('ZCARD', qp .. 'x:' .. st) end
  return n
end

-- drop_oldest cancels the n lowest-ID queued jobs of a queue.
local function drop_oldest(g, q, qp, n, md, now)
  local cand = {}
  for st in pairs(QUEUED) do
    for _, s in ipairs(redis.call('ZRANGE', qp .. 'x:' .. st, 0, n - 1)) do cand[#cand + 1] = tonumber(s) end
  end
  table.sort(cand)
  local msg = string.format(MSG_DROPPED, q, md)
  for i = 1, math.min(n, #cand) do
    local j = load_job(cand[i])
    append_error(j, error_line(j.a, now, msg))
    finalize(j, 'cancelled', now)
    redis.call('HINCRBY', qp .. 'cfg', 'dropped', 1)
    settle(j.id, 'cancelled', now)
  end
end

-- check_batch refuses a batch that depends on a job that does not exist,
-- or that a full queue rejects, before anything changes; it drops the
-- oldest jobs of full queues with the drop-oldest policy.
local function check_batch(jobs, now)
  for i, j in ipairs(jobs) do
    for s in string.gmatch(j.deps, '[^,]+') do
      local d = tonumber(s)
      if d > 0 and redis.call('EXISTS', jkey(d)) == 0 then
        return { 'E', 'dep', i, fmt(d) }
      end
    end
  end
  local adding, order, seen = {}, {}, {}
  for _, j in ipairs(jobs) do
    local counts = j.dup < 0
    if counts and j.u ~= '' and redis.call('HEXISTS', P .. ':u', j.u) == 1 then counts = false end
    if counts then
      local qp = qpre(j.g, j.q)
      if not adding[qp] then adding[qp] = 0; order[#order + 1] = { qp, j.q, j.g } end
      adding[qp] = adding[qp] + 1
    end
  end
  local drops = {}
  for _, o in ipairs(order) do
    local qp = o[1]
    local cfg = queue_cfg(qp)
    if cfg.md > 0 then
      local queued = queued_count(qp)
      local over = math.max(queued + adding[qp] - cfg.md, 0)
      if over > 0 then
        if cfg.ov == 0 then return { 'E', 'full', o[2], cfg.md, queued, adding[qp] } end
        drops[#drops + 1] = { o[3], o[2], qp, math.min(over, queued), cfg.md }
      end
    end
  end
  for _, d in ipairs(drops) do drop_oldest(d[1], d[2], d[3], d[4], d[5], now) end
  return nil
end

-- insert_batch inserts checked jobs and returns the flat results: per job
-- ID, duplicate (0/1), state; an in-batch duplicate gets ID 0 for the Go
-- side to resolve. workflow gives every job the batch's first ID.
-- IDs: job k of the batch (from 1) gets sequence number base + k, and ID
-- seq*GROUPS + its group, so IDs increase in the order the sequence hands
-- them out, across queues, and within a batch in batch order. base is the
-- caller's when it reserved the numbers itself (on Cluster, where P:seq
-- is on another slot); 0 reserves them here.
local function insert_batch(jobs, now, workflow, base)
  local out = {}
  local ids = {}
  local first = 0
  if base == 0 then base = redis.call('INCRBY', P .. ':seq', #jobs) - #jobs end
  for i, j in ipairs(jobs) do
    local holder = nil
    if j.dup < 0 and j.u ~= '' then holder = redis.call('HGET', P .. ':u', j.u) end
    if j.dup >= 0 then
      ids[i] = -1
      out[#out + 1] = 0; out[#out + 1] = 1; out[#out + 1] = ''
    elseif holder then
      local h = tonumber(holder)
      ids[i] = h
      out[#out + 1] = holder; out[#out + 1] = 1; out[#out + 1] = redis.call('HGET', jkey(h), 'st')
    else
      local id = (base + i) * GROUPS + j.g
      ids[i] = id
      if first == 0 then first = id end
      j.id = id
      j.key = jkey(id)
      j.qp = qpre(j.g, j.q)
      j.a = 0
      local f = { 'q', j.q, 'k', j.k, 'p', j.p, 'a', 0, 'ma', j.ma, 'ra', fmt(j.ra), 'ca', fmt(now), 'args', j.args }
      if j.x ~= '' then f[#f + 1] = 'x'; f[#f + 1] = j.x end
      if j.u ~= '' then f[#f + 1] = 'u'; f[#f + 1] = j.u end
      if j.pk ~= '' then f[#f + 1] = 'pk'; f[#f + 1] = j.pk end
      if j.idf then f[#f + 1] = 'idf'; f[#f + 1] = '1' end
      if workflow then f[#f + 1] = 'wf'; f[#f + 1] = fmt(first) end
      -- Dependencies: existing IDs as given, batch indexes (negative) through
      -- the IDs assigned so far; each once, in order.
      local dl, dseen = {}, {}
      local dstates = {}
      for s in string.gmatch(j.deps, '[^,]+') do
        local d = tonumber(s)
        if d < 0 then d = ids[-d] end
        if d == -1 then d = ids[jobs[-tonumber(s)].dup + 1] end
        if not dseen[d] then
          dseen[d] = true
          dl[#dl + 1] = fmt(d)
          dstates[#dstates + 1] = { d, redis.call('HGET', jkey(d), 'st') }
        end
      end
      if #dl > 0 then f[#f + 1] = 'd'; f[#f + 1] = table.concat(dl, ',') end
      redis.call('HSET', j.key, unpack(f))
      j.d = table.concat(dl, ',')
      local st = j.st
      local cancel = nil
      if #dl > 0 then
        -- The dependency verdict (store.JudgeDeps).
        local waiting = false
        for _, ds in ipairs(dstates) do
          local dst = ds[2]
          if dst == 'completed' then
          elseif FINISHED[dst] then
            if not j.idf and not cancel then cancel = ds end
          else
            waiting = true
          end
        end
        if cancel then st = 'cancelled' elseif waiting then st = 'waiting' end
      end
      redis.call('SADD', P .. ':queues', j.q)
      if st == 'cancelled' then
        append_error(j, error_line(0, now, string.format(MSG_DEP_ENDED, fmt(cancel[1]), cancel[2])))
        j.st = 'none'
        enter(j, 'cancelled', now)
        cancelled_by(j, cancel[1])
      else
        hold_key(j)
        if st == 'waiting' then
          wait_for(j)
          j.st = 'none'
          enter(j, 'waiting')
        else
          j.st = 'none'
          enter(j, st)
        end
        note_queue(j)
      end
      out[#out + 1] = fmt(id); out[#out + 1] = 0; out[#out + 1] = st
    end
  end
  return out
end

-- sortie_enqueue inserts a batch atomically.
-- KEYS[1]: the first job's queue's QP h (routing only).
-- ARGV: P, now, workflow (0/1), n, sequence base (0: reserve here; see
--   insert_batch), then n jobs of JOB_FIELDS values each:
--   queue, group, kind, priority, max attempts, RunAt, start state
--   (available or scheduled), unique key, partition key, args, x (opaque),
--   ignore dependency failure (0/1), index of the earlier batch job with
--   the same unique key (-1: none), number of dependencies, then the
--   dependencies as one comma-separated string: existing IDs, and
--   -(index+1) for an earlier job of the batch.
-- Returns per job: ID, duplicate (0/1), state; or {'E', 'dep', i, id} for
-- an unknown dependency, {'E', 'full', queue, max, queued, adding} for a
-- full queue that rejects.
local function enqueue(keys, argv)
  P = argv[1]
  local now = tonumber(argv[2])
  local n = tonumber(argv[4])
  local jobs = parse_jobs(argv, 6, n)
  local err = check_batch(jobs, now)
  if err then return err end
  local out = insert_batch(jobs, now, argv[3] == '1', tonumber(argv[5]))
  send_notes()
  return out
end

-- Fetch. ------------------------------------------------------------------

-- promote moves up to PROMOTE_MAX scheduled or retrying jobs due at now to
-- their lanes.
local function promote(qp, now)
  for _, s in ipairs(redis.call('ZRANGEBYSCORE', qp .. 's', '-inf', fmt(now), 'LIMIT', 0, PROMOTE_MAX)) do
    local j = load_job(tonumber(s))
    leave(j)
    enter(j, 'available')
  end
end

-- window_count returns the starts recorded in the rate window of period
-- ending at now, forgetting those older than two periods (store.RateWindow).
local function window_count(key, now, period)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - 2 * period))
  return redis.call('ZCOUNT', key, '(' .. fmt(now - period), '+inf')
end

-- free_at returns when the window next allows a start (store.RateWindow.FreeAt).
local function free_at(key, now, period, limit)
  local started = redis.call('ZCOUNT', key, '(' .. fmt(now - period), '+inf')
  local need = started - limit + 1
  if need <= 0 then return 0 end
  local s = redis.call('ZRANGEBYSCORE', key, '(' .. fmt(now - period), '+inf', 'WITHSCORES', 'LIMIT', need - 1, 1)
  if #s == 0 then return 0 end
  return tonumber(s[2]) + period
end

local function claim(j, now, lease, worker, tok, cfg)
  leave(j)
  j.a = j.a + 1
  redis.call('HSET', j.key, 'a', j.a, 'ata', fmt(now), 'atb', worker, 'lu', fmt(now + lease), 'tok', fmt(tok))
  enter(j, 'running', now + lease)
  local m = fmt(j.id) .. ':' .. fmt(tok)
  if cfg.rl > 0 then redis.call('ZADD', j.qp .. 'rate', fmt(now), m) end
  if cfg.prl > 0 and j.pk ~= '' then redis.call('ZADD', j.qp .. 'pr:' .. j.pk, fmt(now), m) end
end

-- sortie_fetch claims up to limit available jobs of one queue.
-- KEYS[1]: the queue's heads key QP h.
-- ARGV: P, queue, group, now, lease (µs), worker, limit, then the kinds to
--   claim (none: every kind).
-- Returns: NextAt (µs, 0 when none or the fetch is full), then per claimed
--   job, in claim order, its ID and its hash (HGETALL).
local function fetch(keys, argv)
  P = argv[1]
  local q, g, now, lease, worker, limit = argv[2], tonumber(argv[3]), tonumber(argv[4]), tonumber(argv[5]), argv[6], tonumber(argv[7])
  local kinds = nil
  if #argv > 7 then
    kinds = {}
    for i = 8, #argv do kinds[argv[i]] = true end
  end
  local qp = qpre(g, q)
  local cfg = queue_cfg(qp)
  promote(qp, now)
  local out = { 0 }
  if cfg.paused then return out end
  local room = limit
  local started = 0
  if cfg.mr > 0 then room = math.min(room, cfg.mr - redis.call('ZCARD', qp .. 'r')) end
  if cfg.rl > 0 then
    started = window_count(qp .. 'rate', now, cfg.rp)
    room = math.min(room, cfg.rl - started)
  end
  local partitioned = cfg.pmr > 0 or cfg.prl > 0
  local proom = {}
  local function part_room(pk)
    local r = proom[pk]
    if r == nil then
      r = limit
      if cfg.pmr > 0 then r = math.min(r, cfg.pmr - tonumber(redis.call('HGET', qp .. 'prun', pk) or '0')) end
      if cfg.prl > 0 then r = math.min(r, cfg.prl - window_count(qp .. 'pr:' .. pk, now, cfg.prp)) end
      proom[pk] = r
    end
    return r
  end
  local got = 0
  local skip = 0
  local tok = 0
  if room > 0 then
    tok = redis.call('INCRBY', P .. ':{' .. fmt(g) .. '}:tok', room) - room
  end
  while got < room and skip <= SKIP_MAX do
    local h = redis.call('ZRANGE', qp .. 'h', skip, skip)[1]
    if not h then break end
    local lid = string.sub(h, 36)
    local sep = string.find(lid, '\0', 1, true)
    local kind, pk = string.sub(lid, 2, sep - 1), string.sub(lid, sep + 1)
    if (kinds and not kinds[kind]) or (partitioned and pk ~= '' and part_room(pk) <= 0) then
      skip = skip + 1
    else
      local j = load_job(tonumber(string.sub(h, 20, 35)))
      got = got + 1
      tok = tok + 1
      claim(j, now, lease, worker, tok, cfg)
      if partitioned and pk ~= '' then proom[pk] = proom[pk] - 1 end
      out[#out + 1] = fmt(j.id)
      out[#out + 1] = row(j.id)
    end
  end
  if got < limit then
    local next = 0
    local s = redis.call('ZRANGE', qp .. 's', 0, 0, 'WITHSCORES')
    if #s > 0 then next = tonumber(s[2]) end
    if cfg.rl > 0 and started + got >= cfg.rl and redis.call('ZCARD', qp .. 'x:available') > 0 then
      local f = free_at(qp .. 'rate', now, cfg.rp, cfg.rl)
      if f > 0 and (next == 0 or f < next) then next = f end
    end
    out[1] = fmt(next)
  end
  return out
end

-- Finish. -----------------------------------------------------------------

-- The report kinds, as store.ReportKind numbers them.
local COMPLETED, FAILED, CANCELLED, SNOOZED, RELEASED = 1, 2, 3, 4, 5
local REPORT_FIELDS = 10

-- apply_report moves running job j on by one report (store.Transitions).
-- r: kind, runat, has error, error attempt, error at, message, stack,
-- has result, result.
local function apply_report(j, r, now)
  leave(j)
  redis.call('HDEL', j.key, 'lu', 'cr')
  local st
  local kind = r.kind
  local runat = r.runat
  if runat == 0 then runat = now end
  if kind == COMPLETED then
    st = 'completed'
    if r.hasres then redis.call('HSET', j.key, 'res', r.res, 'hr', '1') else redis.call('HDEL', j.key, 'res', 'hr') end
  elseif kind == FAILED then
    if j.a >= j.ma then st = 'dead' else st = 'retrying'; j.ra = runat end
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
    if a == 0 then a = j.a end
    local at = r.eat
    if at == 0 then at = now end
    local m = r.msg
    if m == '' then m = MSG_NO_ERROR end
    append_error(j, error_line(a, at, m, r.stack))
  end
  if kind == SNOOZED or kind == RELEASED then
    j.a = j.a - 1
    redis.call('HSET', j.key, 'a', j.a)
  end
  redis.call('HSET', j.key, 'ra', fmt(j.ra))
  if FINISHED[st] then
    release_key(j)
    enter(j, st, now)
    done(j)
    settle(j.id, st, now)
  else
    enter(j, st)
    note_queue(j)
  end
  return st
end

-- sortie_finish applies the reports of finished attempts, each only if
-- its job is running with the report's claim token (fencing).
-- KEYS[1]: the first report's job key (routing only).
-- ARGV: P, now, n, then n reports of REPORT_FIELDS values each: ID, claim
--   token, kind (store.ReportKind), RunAt (0: now), has error (0/1), error
--   attempt (0: the job's), error at (0: now), message, stack, and the
--   result: '' for none, else '1' followed by the bytes.
-- Returns per report: state after it, or '' when refused.
local function finish(keys, argv)
  P = argv[1]
  local now = tonumber(argv[2])
  local n = tonumber(argv[3])
  local out = {}
  for i = 1, n do
    local b = 4 + (i - 1) * REPORT_FIELDS
    local j = load_job(tonumber(argv[b]))
    if j and j.st == 'running' and j.tok == argv[b + 1] then
      local res = argv[b + 9]
      local r = {
        kind = tonumber(argv[b + 2]), runat = tonumber(argv[b + 3]), haserr = argv[b + 4] == '1',
        ea = tonumber(argv[b + 5]), eat = tonumber(argv[b + 6]), msg = argv[b + 7], stack = argv[b + 8],
        hasres = res ~= '', res = string.sub(res, 2),
      }
      local cfg = queue_cfg(j.qp)
      if cfg.mr > 0 or cfg.pmr > 0 then note_queue(j) end
      out[i] = apply_report(j, r, now)
    else
      out[i] = ''
    end
  end
  send_notes()
  return out
end

-- sortie_extend extends the leases still held and records progress.
-- KEYS[1]: the first lease's job key (routing only).
-- ARGV: P, now, lease (µs), n, then n leases of 4 values: ID, claim token,
--   has progress (0/1), progress.
-- Returns per lease: 0 lost, 1 held, 2 held with a cancel requested.
local function extend(keys, argv)
  P = argv[1]
  local now, lease, n = tonumber(argv[2]), tonumber(argv[3]), tonumber(argv[4])
  local out = {}
  for i = 1, n do
    local b = 5 + (i - 1) * 4
    local id = tonumber(argv[b])
    local k = jkey(id)
    local v = redis.call('HMGET', k, 'st', 'tok', 'cr', 'q')
    if v[1] == 'running' and v[2] == argv[b + 1] then
      local until_ = now + lease
      redis.call('HSET', k, 'lu', fmt(until_))
      redis.call('ZADD', qpre(grp(id), v[4]) .. 'r', 'XX', fmt(until_), fmt(id))
      if argv[b + 2] == '1' then redis.call('HSET', k, 'pr', argv[b + 3]) end
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
  P = argv[1]
  local q, g, now, limit = argv[2], tonumber(argv[3]), tonumber(argv[4]), tonumber(argv[5])
  local qp = qpre(g, q)
  local ids = redis.call('ZRANGEBYSCORE', qp .. 'r', '-inf', '(' .. fmt(now), 'LIMIT', 0, limit)
  for _, s in ipairs(ids) do
    local j = load_job(tonumber(s))
    leave(j)
    redis.call('HDEL', j.key, 'lu', 'cr')
    append_error(j, error_line(j.a, now, MSG_LEASE_LOST))
    local st
    if j.cr then st = 'cancelled' elseif j.a >= j.ma then st = 'dead' else st = 'available' end
    if FINISHED[st] then
      release_key(j)
      enter(j, st, now)
      done(j)
      settle(j.id, st, now)
    else
      enter(j, st)
      note_queue(j)
    end
  end
  send_notes()
  return #ids
end

-- Operators. --------------------------------------------------------------

-- sortie_cancel cancels a pending job, or asks a running one to stop.
-- KEYS[1]: the job's key. ARGV: P, ID, now.
-- Returns the job's hash afterwards, or {'E', 'notfound'}.
local function cancel(keys, argv)
  P = argv[1]
  local now = tonumber(argv[3])
  local j = load_job(tonumber(argv[2]))
  if not j then return { 'E', 'notfound' } end
  if j.st == 'running' then
    redis.call('HSET', j.key, 'cr', '1')
  elseif PENDING[j.st] then
    finalize(j, 'cancelled', now)
    settle(j.id, 'cancelled', now)
  end
  send_notes()
  return row(j.id)
end

-- forget_job deletes job j's hash and its link sets.
local function forget_job(j)
  redis.call('DEL', j.key, j.key .. ':cc')
end

-- sortie_delete removes a job that is not running.
-- KEYS[1]: the job's key. ARGV: P, ID, now.
-- Returns the job's hash as it was, or {'E', 'notfound'} / {'E', 'running'}.
local function delete(keys, argv)
  P = argv[1]
  local now = tonumber(argv[3])
  local j = load_job(tonumber(argv[2]))
  if not j then return { 'E', 'notfound' } end
  if j.st == 'running' then return { 'E', 'running' } end
  local was = row(j.id)
  leave(j)
  if PENDING[j.st] then release_key(j) end
  forget_job(j)
  done(j)
  settle(j.id, 'deleted', now)
  send_notes()
  return was
end

-- revivable reports whether cancelled job y can wait again: its unique key
-- is free and every dependency still exists.
local function revivable(y)
  if y.u ~= '' and redis.call('HEXISTS', P .. ':u', y.u) == 1 then return false end
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
      local y = load_job(tonumber(s))
      if not y or y.st ~= 'cancelled' or y.cby ~= fmt(x) then
        redis.call('SREM', cc, s)
      elseif revivable(y) then
        redis.call('SREM', cc, s)
        leave(y)
        redis.call('HDEL', y.key, 'fa', 'cby')
        hold_key(y)
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

-- sortie_retry runs a job again (store.Store.JobRetry).
-- KEYS[1]: the job's key. ARGV: P, ID, now.
-- Returns the job's hash afterwards, or {'E', 'notfound'}, {'E', 'running'},
-- {'E', 'unique', key, holder ID}.
local function retry(keys, argv)
  P = argv[1]
  local now = tonumber(argv[3])
  local j = load_job(tonumber(argv[2]))
  if not j then return { 'E', 'notfound' } end
  if j.st == 'running' then return { 'E', 'running' } end
  if j.st == 'available' or j.st == 'waiting' then return row(j.id) end
  if FINISHED[j.st] then
    if j.u ~= '' then
      local h = redis.call('HGET', P .. ':u', j.u)
      if h then return { 'E', 'unique', j.u, h } end
    end
    leave(j)
    redis.call('HDEL', j.key, 'fa', 'cby')
    hold_key(j)
  else
    leave(j)
  end
  if j.a >= j.ma then
    j.ma = j.a + 1
    redis.call('HSET', j.key, 'ma', j.ma)
  end
  j.ra = now
  redis.call('HSET', j.key, 'ra', fmt(now))
  if j.d ~= '' and wait_for(j) > 0 then
    enter(j, 'waiting')
  else
    enter(j, 'available')
    note_queue(j)
  end
  revive(j.id, now)
  send_notes()
  return row(j.id)
end

-- sortie_prune deletes up to limit finished jobs of one queue finalized
-- before the cutoffs, oldest first within each state.
-- KEYS[1]: the queue's key QP cfg (routing only).
-- ARGV: P, queue, group, now, limit, cutoff for completed, cancelled, dead
--   (µs; 0 prunes none of that state).
-- Returns the number of jobs deleted.
local function prune(keys, argv)
  P = argv[1]
  local q, g, now, limit = argv[2], tonumber(argv[3]), tonumber(argv[4]), tonumber(argv[5])
  local qp = qpre(g, q)
  local n = 0
  for i, st in ipairs({ 'completed', 'cancelled', 'dead' }) do
    local cut = tonumber(argv[5 + i])
    if cut > 0 and n < limit then
      for _, s in ipairs(redis.call('ZRANGEBYSCORE', qp .. 'f:' .. st, '-inf', '(' .. fmt(cut), 'LIMIT', 0, limit - n)) do
        local j = load_job(tonumber(s))
        leave(j)
        forget_job(j)
        settle(j.id, 'deleted', now)
        n = n + 1
      end
    end
  end
  send_notes()
  return n
end

-- Queues and schedules. ---------------------------------------------------

-- sortie_configure replaces a queue's settings.
-- KEYS[1]: QP cfg. ARGV: P, queue, group, now, then the settings: max
--   running, rate limit, rate period (µs), partition max running,
--   partition rate limit, partition rate period (µs), max depth, overflow.
-- Returns the queue's cfg hash.
local function configure(keys, argv)
  P = argv[1]
  local q, g, now = argv[2], tonumber(argv[3]), argv[4]
  local qp = qpre(g, q)
  redis.call('HSET', qp .. 'cfg', 'mr', argv[5], 'rl', argv[6], 'rp', argv[7], 'pmr', argv[8], 'prl', argv[9],
    'prp', argv[10], 'md', argv[11], 'ov', argv[12], 'set', '1', 'ua', now)
  redis.call('SADD', P .. ':queues', q)
  redis.call('SPUBLISH', wchan(g, q), '')
  return redis.call('HGETALL', qp .. 'cfg')
end

-- sortie_pause pauses or resumes a queue for every process.
-- KEYS[1]: QP cfg. ARGV: P, queue, group, now, paused (0/1).
-- Returns the queue's cfg hash.
local function pause(keys, argv)
  P = argv[1]
  local q, g, now = argv[2], tonumber(argv[3]), argv[4]
  local qp = qpre(g, q)
  redis.call('HSET', qp .. 'cfg', 'paused', argv[5], 'ua', now)
  redis.call('SADD', P .. ':queues', q)
  if argv[5] == '0' then redis.call('SPUBLISH', wchan(g, q), '') end
  return redis.call('HGETALL', qp .. 'cfg')
end

-- sortie_periodic moves a schedule's last slot from one time to another
-- and enqueues its jobs, in one step, only if the last slot is still the
-- first time.
-- KEYS[1]: P:periodic. ARGV: P, name, from (µs, 0: never advanced), to,
--   then the arguments of sortie_enqueue from its now on.
-- Returns {1, results of the enqueue...} when applied, {0, last} when not,
-- or an enqueue error.
local function periodic(keys, argv)
  P = argv[1]
  local name, from, to = argv[2], argv[3], argv[4]
  local last = redis.call('HGET', P .. ':periodic', name) or '0'
  if last ~= from then return { 0, last } end
  local eargv = { P }
  for i = 5, #argv do eargv[#eargv + 1] = argv[i] end
  local now = tonumber(eargv[2])
  local jobs = parse_jobs(eargv, 6, tonumber(eargv[4]))
  local err = check_batch(jobs, now)
  if err then return err end
  local out = insert_batch(jobs, now, eargv[3] == '1', tonumber(eargv[5]))
  redis.call('HSET', P .. ':periodic', name, to)
  redis.call('HSET', P .. ':periodic:at', name, eargv[2])
  send_notes()
  table.insert(out, 1, 1)
  return out
end

-- register registers fn under name; every call starts with no pending
-- notifications.
local function register(name, fn)
  redis.register_function(name, function(keys, argv)
    notes = {}
    return fn(keys, argv)
  end)
end

redis.register_function { function_name = 'sortie_version', callback = function() return LIB_VERSION end, flags = { 'no-writes' } }
register('sortie_enqueue', enqueue)
register('sortie_fetch', fetch)
register('sortie_finish', finish)
register('sortie_extend', extend)
register('sortie_rescue', rescue)
register('sortie_cancel', cancel)
register('sortie_delete', delete)
register('sortie_retry', retry)
register('sortie_prune', prune)
register('sortie_configure', configure)
register('sortie_pause', pause)
register('sortie_periodic', periodic)
