#!/usr/bin/env bash
# compare.sh runs sortie's benchmark workloads side by side with its peers,
# interleaved so that a noisy neighbour on the machine hits both sides
# alike, and prints the median of the rounds:
#
#   PostgreSQL: sortie bench --store URL   vs  peerbench --peer river
#               (each of $RIVER_CONFIGS)
#   SQLite:     sortie bench --store sqlite vs  peerbench --peer backlite
#   Redis:      sortie bench --store URL   vs  peerbench --peer asynq (each
#               of $ASYNQ_CONFIGS) and --peer bullmq, and the server's raw
#               limit: redis-benchmark calling a trivial function (FCALL)
#               and script (EVALSHA), and peerbench --peer redis-raw's
#               plain-command transactions (MULTI/EXEC), unpipelined and
#               16 to a pipeline
#
# usage: bench/peers/compare.sh [POSTGRES_URL [REDIS_URL]]
#   POSTGRES_URL defaults to $SORTIE_TEST_POSTGRES_URL, REDIS_URL to
#   $SORTIE_TEST_REDIS_URL; the Redis half runs when there is a REDIS_URL.
#   Use a Redis server nothing else writes to; the peers delete their keys
#   after each run.
#
# Environment:
#   ROUNDS=3                  rounds of each pair
#   WORKLOADS="enqueue-single enqueue-batch drain latency"
#   RIVER_CONFIGS="river-bench tuned"
#   ASYNQ_CONFIGS="defaults tuned"
#   RAW=1                     also run the raw baselines (peerbench --peer
#                             river-raw: SKIP LOCKED delete loop, one-row
#                             INSERTs, COPY; --peer redis-raw: ZPOPMIN loop,
#                             MULTI/EXEC per job)
#   JOBS=                     --jobs for the enqueue and drain workloads of
#                             every run (default: each command's own default)
#   SKIP_PG=1 / SKIP_SQLITE=1 / SKIP_REDIS=1
#                             leave one half out
#   SKIP_SORTIE=1             run only the peers (until sortie's PostgreSQL
#                             and Redis stores work)
#   RAW_REQUESTS=200000       calls per redis-benchmark run
#   MEMORY=1                  also run peerbench's memory workload once per
#                             Redis peer, after the rounds: MEMORY_JOBS
#                             (default 1000000) jobs padded by MEMORY_PAYLOAD
#                             (default 0) bytes, used_memory growth per job
#
# The Redis half installs BullMQ (bench/peers/bullmq/install.sh, npm) when
# its node_modules does not hold the pinned version.
#
# Each command runs with --json; a failed run is reported and left out of
# the medians.
set -uo pipefail

url=${1:-${SORTIE_TEST_POSTGRES_URL:-}}
redis_url=${2:-${SORTIE_TEST_REDIS_URL:-}}
rounds=${ROUNDS:-3}
workloads=${WORKLOADS:-"enqueue-single enqueue-batch drain latency"}
river_configs=${RIVER_CONFIGS:-"river-bench tuned"}
asynq_configs=${ASYNQ_CONFIGS:-"defaults tuned"}
raw_requests=${RAW_REQUESTS:-200000}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

if [[ -z ${SKIP_PG:-} && -z $url ]]; then
	echo "compare.sh: give a PostgreSQL URL or set SORTIE_TEST_POSTGRES_URL (or SKIP_PG=1)" >&2
	exit 2
fi
if [[ -z ${SKIP_REDIS:-} && -z $redis_url ]]; then
	echo "compare.sh: no Redis URL (second argument or SORTIE_TEST_REDIS_URL): leaving the Redis half out" >&2
	SKIP_REDIS=1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
results=$tmp/results.tsv
: >"$results"

# Build once: the runs then time the benchmarks, not the compiler.
echo "building sortie and peerbench ..." >&2
if [[ -z ${SKIP_SORTIE:-} ]]; then
	(cd "$root" && go build -o "$tmp/sortie" ./cmd/sortie) || exit 1
fi
(cd "$here" && go build -o "$tmp/peerbench" ./cmd/peerbench) || exit 1
if [[ -z ${SKIP_REDIS:-} ]]; then
	pinned=$(sed -n 's/^ *"bullmq": "\(.*\)".*/\1/p' "$here/bullmq/package.json")
	installed=$(sed -n 's/^  "version": "\(.*\)",*$/\1/p' "$here/bullmq/node_modules/bullmq/package.json" 2>/dev/null)
	if [[ $installed != "$pinned" ]]; then
		echo "installing bullmq $pinned ..." >&2
		"$here/bullmq/install.sh" || exit 1
	fi
	for tool in redis-cli redis-benchmark; do
		command -v $tool >/dev/null || { echo "compare.sh: the Redis half needs $tool" >&2; exit 2; }
	done
fi

# field NAME JSON prints the number of field NAME of a one-line JSON object.
field() {
	sed -n "s/.*\"$1\":\([-0-9.eE+]*\).*/\1/p" <<<"$2"
}

# run LABEL WORKLOAD CMD... runs CMD with --json and records its result.
run() {
	local label=$1 workload=$2
	shift 2
	local jobs=()
	if [[ -n ${JOBS:-} && $workload != latency ]]; then
		jobs=(--jobs "$JOBS")
	fi
	local out
	echo "  $label $workload" >&2
	if ! out=$("$@" --workload "$workload" "${jobs[@]}" --json 2>"$tmp/err"); then
		echo "  FAILED: $label $workload:" >&2
		sed 's/^/    /' "$tmp/err" >&2
		return
	fi
	printf '%s\t%s\t%s\t%s\t%s\n' "$label" "$workload" \
		"$(field jobs_per_sec "$out")" "$(field p50_ms "$out")" "$(field p99_ms "$out")" >>"$results"
}

# settle_redis waits until the Redis server has no AOF rewrite or RDB save
# under way (or scheduled), so that no system's run shares the machine
# with the fork a previous run's writes set off. Every Redis run, sortie's
# and the peers', waits for it.
settle_redis() {
	local i
	for ((i = 0; i < 600; i++)); do
		if ! redis-cli -u "$redis_url" INFO persistence |
			grep -Eq '^(aof_rewrite_in_progress|aof_rewrite_scheduled|rdb_bgsave_in_progress):1'; then
			return
		fi
		sleep 0.1
	done
	echo "  the Redis server is still rewriting its AOF after a minute; going on" >&2
}

# raw_redis records what redis-benchmark makes of a trivial function
# (FCALL) and the same script by its SHA (EVALSHA), each with 50 clients,
# unpipelined and 16 calls to a pipeline: the most calls per second the
# server answers, under any queue's Lua.
raw_redis() {
	local sha pipe out
	redis-cli -u "$redis_url" FUNCTION LOAD REPLACE \
		"#!lua name=peerbench
redis.register_function('peerbench_noop', function(keys, args) return 1 end)" >/dev/null || return
	sha=$(redis-cli -u "$redis_url" SCRIPT LOAD "return 1") || return
	for pipe in 1 16; do
		for call in "FCALL peerbench_noop 0" "EVALSHA $sha 0"; do
			echo "  redis-benchmark ${call%% *} -P $pipe" >&2
			# --csv: "test","rps","avg_latency_ms","min_latency_ms",
			# "p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
			if ! out=$(redis-benchmark -u "$redis_url" -n "$raw_requests" -c 50 -P "$pipe" --csv $call 2>"$tmp/err" | tail -1); then
				echo "  FAILED: redis-benchmark $call:" >&2
				sed 's/^/    /' "$tmp/err" >&2
				continue
			fi
			IFS=, read -r _ rps _ _ p50 _ p99 _ <<<"${out//\"/}"
			printf '%s\t%s\t%s\t%s\t%s\n' "raw redis P=$pipe" "${call%% *}" "$rps" "$p50" "$p99" >>"$results"
		done
	done
	redis-cli -u "$redis_url" FUNCTION DELETE peerbench >/dev/null
	# Plain commands, no script: MULTI HSET ZADD EXEC per job from 8
	# connections, one transaction a round trip and 16 pipelined.
	for pipe in 1 16; do
		local w=enqueue-single extra=()
		if [[ $pipe != 1 ]]; then
			w=enqueue-batch extra=(--batch "$pipe" --producers 8)
		fi
		echo "  peerbench redis-raw MULTI/EXEC -P $pipe" >&2
		settle_redis
		if ! out=$("$tmp/peerbench" --peer redis-raw --redis "$redis_url" --workload $w --jobs "$raw_requests" \
			"${extra[@]}" --json 2>"$tmp/err"); then
			echo "  FAILED: redis-raw MULTI/EXEC -P $pipe:" >&2
			sed 's/^/    /' "$tmp/err" >&2
			continue
		fi
		printf '%s\t%s\t%s\t%s\t%s\n' "raw redis P=$pipe" "MULTI/EXEC" "$(field jobs_per_sec "$out")" \
			"$(field p50_ms "$out")" "$(field p99_ms "$out")" >>"$results"
	done
}

for ((round = 1; round <= rounds; round++)); do
	echo "round $round of $rounds" >&2
	for w in $workloads; do
		if [[ -z ${SKIP_PG:-} ]]; then
			if [[ -z ${SKIP_SORTIE:-} ]]; then
				run "sortie postgres" "$w" "$tmp/sortie" bench --store "$url" --repeat 1
			fi
			for c in $river_configs; do
				run "river $c" "$w" "$tmp/peerbench" --peer river --config "$c" --database "$url" --repeat 1
			done
			if [[ -n ${RAW:-} && $w != latency ]]; then
				run "raw sql" "$w" "$tmp/peerbench" --peer river-raw --database "$url" --repeat 1
			fi
		fi
		if [[ -z ${SKIP_SQLITE:-} ]]; then
			if [[ -z ${SKIP_SORTIE:-} ]]; then
				run "sortie sqlite" "$w" "$tmp/sortie" bench --store sqlite --repeat 1
			fi
			run "backlite" "$w" "$tmp/peerbench" --peer backlite --repeat 1
		fi
		if [[ -z ${SKIP_REDIS:-} ]]; then
			if [[ -z ${SKIP_SORTIE:-} ]]; then
				settle_redis
				run "sortie redis" "$w" "$tmp/sortie" bench --store "$redis_url" --repeat 1
			fi
			for c in $asynq_configs; do
				settle_redis
				run "asynq $c" "$w" "$tmp/peerbench" --peer asynq --config "$c" --redis "$redis_url" --repeat 1
			done
			settle_redis
			run "bullmq" "$w" "$tmp/peerbench" --peer bullmq --redis "$redis_url" --bullmq-dir "$here/bullmq" --repeat 1
			if [[ -n ${RAW:-} && $w != latency ]]; then
				settle_redis
				run "redis-raw" "$w" "$tmp/peerbench" --peer redis-raw --redis "$redis_url" --repeat 1
			fi
		fi
	done
	if [[ -z ${SKIP_REDIS:-} ]]; then
		raw_redis
	fi
done

# The memory workload, once per Redis peer: used_memory growth per job.
memory=$tmp/memory.tsv
: >"$memory"
if [[ -z ${SKIP_REDIS:-} && -n ${MEMORY:-} ]]; then
	echo "memory" >&2
	for p in asynq bullmq; do
		echo "  $p memory" >&2
		extra=()
		[[ $p == bullmq ]] && extra=(--bullmq-dir "$here/bullmq")
		if ! out=$("$tmp/peerbench" --peer $p --redis "$redis_url" "${extra[@]}" --workload memory \
			--jobs "${MEMORY_JOBS:-1000000}" --payload "${MEMORY_PAYLOAD:-0}" --json 2>"$tmp/err"); then
			echo "  FAILED: $p memory:" >&2
			sed 's/^/    /' "$tmp/err" >&2
			continue
		fi
		printf '%s\t%s\t%s\t%s\n' "$p" "$(field jobs "$out")" "$(field bytes_per_job "$out")" \
			"$(field dataset_bytes_per_job "$out")" >>"$memory"
	done
fi

# The median of each figure over the rounds, per system and workload.
echo
printf '%-18s  %-14s  %5s  %11s  %9s  %9s\n' SYSTEM WORKLOAD RUNS "JOBS/S" "P50 MS" "P99 MS"
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
for w in $workloads FCALL EVALSHA MULTI/EXEC; do
	cut -f1 "$results" | awk '!seen[$0]++' | while IFS= read -r label; do
		rows=$(awk -F'\t' -v l="$label" -v w="$w" '$1==l && $2==w' "$results")
		[[ -z $rows ]] && continue
		n=$(wc -l <<<"$rows")
		rate=$(cut -f3 <<<"$rows" | median)
		p50=$(cut -f4 <<<"$rows" | median)
		p99=$(cut -f5 <<<"$rows" | median)
		if [[ $w == drain ]]; then
			# drain has no percentiles.
			printf '%-18s  %-14s  %5d  %11.0f  %9s  %9s\n' "$label" "$w" "$n" "$rate" - -
		else
			printf '%-18s  %-14s  %5d  %11.0f  %9.3f  %9.3f\n' "$label" "$w" "$n" "$rate" "$p50" "$p99"
		fi
	done
done
if [[ -s $memory ]]; then
	echo
	printf '%-18s  %9s  %11s  %15s\n' SYSTEM JOBS "BYTES/JOB" "DATASET B/JOB"
	while IFS=$'\t' read -r label jobs per dataset; do
		printf '%-18s  %9d  %11.1f  %15.1f\n' "$label" "$jobs" "$per" "$dataset"
	done <"$memory"
fi
if [[ -z ${SKIP_REDIS:-} ]]; then
	echo
	echo "raw redis: redis-benchmark, 50 clients, $raw_requests calls of a function returning 1 (FCALL) or the same"
	echo "script by SHA (EVALSHA); JOBS/S is calls per second, P50/P99 its per-call latency. MULTI/EXEC:"
	echo "peerbench --peer redis-raw, $raw_requests transactions (MULTI HSET ZADD EXEC) from 8 connections,"
	echo "one a round trip (P=1) or 16 pipelined (P=16); JOBS/S is transactions per second"
fi
