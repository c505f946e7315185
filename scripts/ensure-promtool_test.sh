#!/usr/bin/env bash
# Tests scripts/ensure-promtool: with promtool on PATH it exits 0 and prints nothing; -h prints
# its usage; an unknown argument exits 2; and with promtool missing it fails with a clear error
# rather than installing, both when it is not root and when there is no apt-get (a PATH that
# holds bash alone). Whether the install with apt-get works is left to make test's own call.
#
#   scripts/ensure-promtool_test.sh    (exit status 0 when every check passed)
#
# Needs promtool on PATH, or root and apt-get (it runs the script under test first).
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
readonly ENSURE=$script_dir/ensure-promtool
readonly NAME=ensure-promtool_test

# shellcheck source=testlib.sh
source "$script_dir/testlib.sh"

DIR=$(mktemp -d "${TMPDIR:-/tmp}/ensure-promtool-test.XXXXXX")
trap 'rm -rf "$DIR"' EXIT
chmod 755 "$DIR"

# run [ENV...] -- ARGS... : runs the script under test; sets rc, out, err.
run() {
	local env=()
	while [[ $1 != -- ]]; do
		env+=("$1")
		shift
	done
	shift
	rc=0
	env "${env[@]}" "$ENSURE" "$@" >"$DIR/out" 2>"$DIR/err" </dev/null || rc=$?
	out=$(<"$DIR/out")
	err=$(<"$DIR/err")
}

run --
check "it exits 0 (promtool is on PATH, or was installed)" test "$rc" = 0
on_path() { command -v promtool >/dev/null; }
runs() { promtool --version >/dev/null 2>&1; }
check "promtool is on PATH afterwards" on_path
check "promtool runs" runs
run --
check "with promtool on PATH: exits 0" test "$rc" = 0
check "with promtool on PATH: prints nothing" test -z "$out$err"

run -- -h
check "-h exits 0" test "$rc" = 0
check "-h prints the usage on stderr" grep -q "scripts/ensure-promtool" "$DIR/err"
check "-h prints nothing on stdout" test -z "$out"
run -- bogus
check "an unknown argument exits 2" test "$rc" = 2
check "... naming it" grep -q "unknown argument: bogus" "$DIR/err"

# A PATH with bash and nothing else: no promtool, no apt-get.
mkdir "$DIR/bin"
ln -s "$(command -v bash)" "$DIR/bin/bash"
as_nobody=()
if ((EUID == 0)); then
	run PATH="$DIR/bin" --
	check "as root without apt-get: exits 1" test "$rc" = 1
	check "... saying there is no apt-get" grep -q "there is no apt-get" "$DIR/err"
	check "... and nothing on stdout" test -z "$out"
	sed 's/^/     | /' "$DIR/err"
	# Not root: as nobody, which can read the script (setpriv is util-linux's).
	setpriv=$(command -v setpriv || true)
	[[ -n $setpriv ]] && as_nobody=("$setpriv" --reuid=65534 --regid=65534 --clear-groups)
fi
if ((EUID != 0)) || ((${#as_nobody[@]})); then
	rc=0
	PATH="$DIR/bin" "${as_nobody[@]}" "$ENSURE" >"$DIR/out" 2>"$DIR/err" </dev/null || rc=$?
	check "not root, promtool missing: exits 1" test "$rc" = 1
	check "... saying it cannot install it, and what to install" grep -q "this is not root.*apt-get install prometheus" "$DIR/err"
	check "... and nothing on stdout" test ! -s "$DIR/out"
	sed 's/^/     | /' "$DIR/err"
else
	echo "     (root without setpriv: the not-root check is skipped)"
fi

summary
