#!/usr/bin/env bash
# Tests scripts/ha-postgres for real: a monitor and two nodes on free ports in a temporary folder
# (first start, reuse, synchronous replication, the loss of the primary node and the promotion of
# its standby with nothing committed lost, the lost node rejoining as the standby, status, stop).
# Cleans up every process and folder it made, even on failure.
#
#   scripts/ha-postgres_test.sh        (exit status 0 when every check passed)
#
# Needs pg_auto_failover, or root and apt-get (the script under test installs it).
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
readonly HA=$script_dir/ha-postgres
readonly NAME=ha-postgres_test

# shellcheck source=testlib.sh
source "$script_dir/testlib.sh"

# Three consecutive free ports, below Linux's ephemeral ports (32768-60999): one in that range,
# free now, may become the local end of an outgoing connection before PostgreSQL binds it.
pick_base() {
	local base try p free
	for try in $(seq 1 50); do
		base=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
		free=1
		for p in $base $((base + 1)) $((base + 2)); do
			if port_answers "$p" || { command -v ss >/dev/null 2>&1 && ss -Hltn "sport = :$p" 2>/dev/null | grep -q .; }; then
				free=0
			fi
		done
		if ((free)); then
			echo "$base"
			return 0
		fi
	done
	echo "$NAME: found no three free ports (tried $try)" >&2
	return 1
}

BASE=$(pick_base)
DATA=$(mktemp -d "${TMPDIR:-/tmp}/ha-postgres-test.XXXXXX")
chmod 755 "$DATA" # as root the nodes run as postgres, who must reach the folder
export CHARGEFLOW_DATA=$DATA CHARGEFLOW_HA_PORT=$BASE
ROOT=$DATA/ha-$BASE
OUT=$DATA/stdout ERR=$DATA/stderr
echo "$NAME: ports $BASE-$((BASE + 2)), data $DATA"

cleanup() {
	local f pgid
	"$HA" stop >/dev/null 2>&1 || true
	for f in "$ROOT"/*.pgid; do
		[[ -f $f ]] || continue
		read -r pgid <"$f" || continue
		[[ $pgid =~ ^[0-9]+$ ]] && kill -KILL -- "-$pgid" 2>/dev/null || true
	done
	rm -rf "$DATA"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

run() { # run ARGS... : runs the script under test; sets rc, out
	rc=0
	"$HA" "$@" >"$OUT" 2>"$ERR" </dev/null || rc=$?
	out=$(<"$OUT")
}
show() { sed 's/^/     | /' "$ERR"; }

PSQL=$(command -v psql || ls /usr/lib/postgresql/*/bin/psql 2>/dev/null | head -n 1)
URL="postgres://postgres@127.0.0.1:$((BASE + 1)),127.0.0.1:$((BASE + 2))/postgres?target_session_attrs=read-write&sslmode=disable&connect_timeout=2"
sql() { "$PSQL" -X -q -At "$URL" -c "$1"; }
pgid_of() { cat "$ROOT/$1.pgid"; }

# 1. First start: a monitor, a primary and its synchronous standby; the URL on stdout.
run
show
check "first start exits 0" test "$rc" = 0
check "it prints the multi-host URL" test "$out" = "${URL%&connect_timeout=2}"
check "the monitor and both nodes answer" port_answers "$BASE"
check "... node1" port_answers "$((BASE + 1))"
check "... node2" port_answers "$((BASE + 2))"
check "the primary names a synchronous standby" test -n "$(sql 'SHOW synchronous_standby_names')"
check "the standby streams synchronously" test "$(sql "SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')" 2>&1)" = 1
check "the primary listens on 127.0.0.1 only" test "$(sql 'SHOW listen_addresses' 2>&1)" = 127.0.0.1
sql 'CREATE TABLE ha_test (x int); INSERT INTO ha_test SELECT generate_series(1, 1000)' >/dev/null
first_node1=$(pgid_of node1)

# 2. Reuse: starts nothing.
run
check "a second start exits 0" test "$rc" = 0
check "... starts nothing (same node1 process group)" test "$(pgid_of node1)" = "$first_node1"
run status
check "status exits 0" test "$rc" = 0
check "status names a primary and a secondary" grep -q '^nodes: .*primary.*secondary\|^nodes: .*secondary.*primary' "$OUT"

# 3. The loss of the primary node: SIGKILL to its process group (keeper and PostgreSQL).
primary_port=$(sql 'SELECT inet_server_port()' || true)
primary=node$((primary_port - BASE))
kill -KILL -- "-$(pgid_of "$primary")"
for _ in $(seq 1 100); do port_answers "$primary_port" || break; sleep 0.1; done
check "after SIGKILL the primary's port no longer answers" port_silent "$primary_port"
promoted=''
for _ in $(seq 1 120); do
	if promoted=$(sql 'INSERT INTO ha_test VALUES (1001) RETURNING inet_server_port()' 2>/dev/null); then break; fi
	sleep 0.5
done
check "the standby was promoted and takes writes" test -n "$promoted" -a "$promoted" != "$primary_port"
check "nothing committed before the loss is lost" test "$(sql 'SELECT count(*) FROM ha_test' 2>&1)" = 1001

# 4. Start again: the lost node rejoins as the new primary's standby.
run
show
check "start after the loss exits 0" test "$rc" = 0
check "the lost node rejoined as the secondary" grep -q "$primary secondary" "$ERR"

# 5. stop.
run stop
check "stop exits 0" test "$rc" = 0
check "after stop nothing answers" port_silent "$BASE"
check "... node1" port_silent "$((BASE + 1))"
check "... node2" port_silent "$((BASE + 2))"
run status
check "status exits 3 when nothing answers" test "$rc" = 3

summary
