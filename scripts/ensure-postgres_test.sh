#!/usr/bin/env bash
# Tests scripts/ensure-postgres for real: a private cluster on a free high port in a temporary
# data folder (first start, reuse, crash recovery after kill -9, two copies at once, status,
# stop), the "something already answers" path with the default URL, and the refusal to start
# anything for a remote host. Cleans up every cluster and folder it made, even on failure.
#
#   scripts/ensure-postgres_test.sh        (exit status 0 when every check passed)
#
# Needs PostgreSQL server binaries, or root and apt-get (the script under test installs them).
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
readonly ENSURE=$script_dir/ensure-postgres
readonly NAME=ensure-postgres_test

# shellcheck source=testlib.sh
source "$script_dir/testlib.sh"

# A free port: nothing answers there (and nothing is bound there either, if ss exists).
pick_port() {
	local port try
	for try in $(seq 1 50); do
		port=$((40000 + (RANDOM * 32768 + RANDOM) % 20000))
		port_answers "$port" && continue
		if command -v ss >/dev/null 2>&1 && ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then
			continue
		fi
		printf '%s\n' "$port"
		return 0
	done
	echo "$NAME: found no free port (tried $try)" >&2
	return 1
}

if ! command -v timeout >/dev/null 2>&1; then
	echo "$NAME: needs coreutils timeout" >&2
	exit 1
fi

PORT=$(pick_port)
DATA=$(mktemp -d "${TMPDIR:-/tmp}/ensure-postgres-test.XXXXXX")
chmod 755 "$DATA" # as root the server runs as another user, who must reach the folder
export CHARGEFLOW_DATA=$DATA
export DATABASE_URL="postgres://postgres@127.0.0.1:$PORT/chargeflow?sslmode=disable"
PGDATA_DIR=$DATA/postgres-$PORT
OUT=$DATA/stdout ERR=$DATA/stderr
echo "$NAME: port $PORT, data $DATA"

cleanup() {
	local pid=''
	"$ENSURE" stop >/dev/null 2>&1 || true
	if [[ -f $PGDATA_DIR/postmaster.pid ]]; then
		read -r pid <"$PGDATA_DIR/postmaster.pid" || true
		if [[ $pid =~ ^[0-9]+$ ]]; then kill -9 "$pid" 2>/dev/null || true; fi
	fi
	rm -rf "$DATA"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run ARGS... : runs the script under test; sets rc, out, err, elapsed (seconds, 2 decimals).
run() {
	local t0 t1
	t0=$(date +%s%N)
	rc=0
	"$ENSURE" "$@" >"$OUT" 2>"$ERR" </dev/null || rc=$?
	t1=$(date +%s%N)
	out=$(<"$OUT")
	err=$(<"$ERR")
	elapsed=$(printf '%d.%02d' $(((t1 - t0) / 1000000000)) $(((t1 - t0) / 10000000 % 100)))
}
show() { printf '     | %s\n' "exit $rc in ${elapsed}s" "${err//$'\n'/$'\n     | '}"; }

postmaster_pid() {
	local pid=''
	[[ -f $PGDATA_DIR/postmaster.pid ]] && read -r pid <"$PGDATA_DIR/postmaster.pid"
	printf '%s\n' "$pid"
}

PSQL=$(command -v psql || true)
sql() { # sql QUERY: prints the unaligned result
	PGCONNECT_TIMEOUT=5 "$PSQL" -X -q -At -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -c "$1"
}

# 1. First start: creates and starts a private cluster.
run
show
check "first run exits 0" test "$rc" = 0
check "first run prints nothing on stdout" test -z "$out"
check "first run says it started a private PostgreSQL" grep -q "started a private PostgreSQL .* at 127.0.0.1:$PORT" "$ERR"
check "the port answers" port_answers "$PORT"
check "the cluster lives in \$CHARGEFLOW_DATA/postgres-<port>" test -f "$PGDATA_DIR/PG_VERSION"
if [[ -n $PSQL ]]; then
	check "psql -U postgres: select 1" test "$(sql 'select 1' 2>&1)" = 1
	check "it listens on 127.0.0.1 only" test "$(sql 'show listen_addresses' 2>&1)" = 127.0.0.1
	check "max_connections is 200" test "$(sql 'show max_connections' 2>&1)" = 200
	sql 'create table ensure_test (x int); insert into ensure_test values (42)' >/dev/null
else
	echo "     (no psql here: SQL checks skipped)"
fi
first_pid=$(postmaster_pid)

# 2. Reuse: one line, starts nothing (the time it took is shown, not asserted).
run
show
check "reuse exits 0" test "$rc" = 0
check "reuse prints nothing on stdout" test -z "$out"
check "reuse prints exactly one line" test "$(wc -l <"$ERR")" = 1
check "reuse says it uses the server" grep -q "using the private PostgreSQL at 127.0.0.1:$PORT" "$ERR"
check "reuse started nothing (same postmaster)" test "$(postmaster_pid)" = "$first_pid"

# 3. Crash: kill -9 the postmaster, then recover.
kill -9 "$first_pid"
for _ in $(seq 1 50); do port_answers "$PORT" || break; sleep 0.1; done
check "after kill -9 the port no longer answers" port_silent "$PORT"
run
show
check "run after kill -9 exits 0" test "$rc" = 0
check "run after kill -9 started the server again" grep -q "started a private PostgreSQL" "$ERR"
check "run after kill -9: the port answers" port_answers "$PORT"
check "run after kill -9: a new postmaster" test "$(postmaster_pid)" != "$first_pid"
if [[ -n $PSQL ]]; then
	check "data survived the crash" test "$(sql 'select x from ensure_test' 2>&1)" = 42
fi

# 4. Two copies at once, from a stopped cluster and from no cluster at all.
for state in stopped fresh; do
	"$ENSURE" stop 2>/dev/null
	[[ $state == fresh ]] && rm -rf "$PGDATA_DIR"
	"$ENSURE" >"$DATA/o1" 2>"$DATA/e1" </dev/null &
	p1=$!
	"$ENSURE" >"$DATA/o2" 2>"$DATA/e2" </dev/null &
	p2=$!
	rc1=0 rc2=0
	wait "$p1" || rc1=$?
	wait "$p2" || rc2=$?
	sed 's/^/     | /' "$DATA/e1" "$DATA/e2"
	check "two at once ($state cluster): both exit 0" test "$rc1$rc2" = 00
	check "two at once ($state cluster): nothing on stdout" test ! -s "$DATA/o1" -a ! -s "$DATA/o2"
	check "two at once ($state cluster): exactly one started" test "$(cat "$DATA/e1" "$DATA/e2" | grep -c 'started a private')" = 1
	check "two at once ($state cluster): the other one used it" test "$(cat "$DATA/e1" "$DATA/e2" | grep -c 'using the private')" = 1
	check "two at once ($state cluster): the port answers" port_answers "$PORT"
	check "two at once ($state cluster): no initdb leftovers" test -z "$(find "$DATA" -maxdepth 1 -name '*.initdb.*')"
done

# 5. status and stop.
run status
check "status exits 0 while running" test "$rc" = 0
check "status reports on stdout that the server answers" grep -q ": answering$" "$OUT"
check "status reports the running private cluster" grep -q "^private cluster: $PGDATA_DIR .*running, pid" "$OUT"
run stop
show
check "stop exits 0" test "$rc" = 0
check "stop prints nothing on stdout" test -z "$out"
check "stop says it stopped the private PostgreSQL" grep -q "stopped the private PostgreSQL at 127.0.0.1:$PORT" "$ERR"
check "after stop the port no longer answers" port_silent "$PORT"
run status
check "status exits 3 when nothing answers" test "$rc" = 3
check "status reports the stopped cluster" grep -q "stopped" "$OUT"
run stop
check "stop again is a quiet no-op (exit 0)" test "$rc" = 0

# 6. Remote hosts: never started, clear error.
DATABASE_URL='postgres://postgres@db.nonexistent.invalid:5432/chargeflow' run
check "a remote URL that does not answer fails" test "$rc" = 1
check "... saying it will not start anything there" grep -q "nothing will be started" "$ERR"
check "... and without creating anything" test ! -e "$DATA/postgres-5432"

# 7. The default URL: on a machine where 127.0.0.1:5432 answers, it is used and nothing starts.
if port_answers 5432; then
	env -u DATABASE_URL "$ENSURE" >"$OUT" 2>"$ERR" </dev/null && rc=0 || rc=$?
	sed 's/^/     | /' "$ERR"
	check "default URL: exits 0" test "$rc" = 0
	check "default URL: uses the server at 127.0.0.1:5432" grep -q "using the PostgreSQL at 127.0.0.1:5432" "$ERR"
	check "default URL: starts nothing" test ! -e "$DATA/postgres-5432"
else
	echo "     (nothing answers at 127.0.0.1:5432: default-URL check skipped)"
fi

summary
