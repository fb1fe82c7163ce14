#!/usr/bin/env bash
# compare.sh runs sortie's benchmark workloads side by side with its peers,
# interleaved so that a noisy neighbour on the machine hits both sides
# alike, and prints the median of the rounds:
#
#   PostgreSQL: sortie bench --store URL   vs  peerbench --peer river
#               (each of $RIVER_CONFIGS)
#   SQLite:     sortie bench --store sqlite vs  peerbench --peer backlite
#
# usage: bench/peers/compare.sh [POSTGRES_URL]     (default $SORTIE_TEST_POSTGRES_URL)
#
# Environment:
#   ROUNDS=3                  rounds of each pair
#   WORKLOADS="enqueue-single enqueue-batch drain latency"
#   RIVER_CONFIGS="river-bench tuned"
#   RAW=1                     also run the raw SQL baselines (peerbench --peer
#                             river-raw: SKIP LOCKED delete loop, one-row
#                             INSERTs, COPY) on the PostgreSQL side
#   JOBS=                     --jobs for the enqueue and drain workloads of
#                             every run (default: each command's own default)
#   SKIP_PG=1 / SKIP_SQLITE=1 leave one half out
#   SKIP_SORTIE=1             run only the peers (until sortie's PostgreSQL
#                             store works)
#
# Each command runs with --json; a failed run is reported and left out of
# the medians.
set -uo pipefail

url=${1:-${SORTIE_TEST_POSTGRES_URL:-}}
rounds=${ROUNDS:-3}
workloads=${WORKLOADS:-"enqueue-single enqueue-batch drain latency"}
river_configs=${RIVER_CONFIGS:-"river-bench tuned"}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

if [[ -z ${SKIP_PG:-} && -z $url ]]; then
	echo "compare.sh: give a PostgreSQL URL or set SORTIE_TEST_POSTGRES_URL (or SKIP_PG=1)" >&2
	exit 2
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
	done
done

# The median of each figure over the rounds, per system and workload.
echo
printf '%-18s  %-14s  %5s  %11s  %9s  %9s\n' SYSTEM WORKLOAD RUNS "JOBS/S" "P50 MS" "P99 MS"
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
for w in $workloads; do
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
