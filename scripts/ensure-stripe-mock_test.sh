#!/usr/bin/env bash
# Tests scripts/ensure-stripe-mock in a temporary bin folder: the first run installs the pinned
# version and prints its path, the second reuses it, a binary of another version is replaced, the
# binary serves, CHARGEFLOW_STRIPE_MOCK is used or refused, and an unknown argument is refused.
# Removes the folder it made, even on failure.
#
#   scripts/ensure-stripe-mock_test.sh    (exit status 0 when every check passed)
#
# Needs the Go toolchain and the Go module proxy (or a module cache holding stripe-mock).
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
readonly ENSURE=$script_dir/ensure-stripe-mock
readonly NAME=ensure-stripe-mock_test

# shellcheck source=testlib.sh
source "$script_dir/testlib.sh"

DIR=$(mktemp -d "${TMPDIR:-/tmp}/ensure-stripe-mock-test.XXXXXX")
mock_pid=''
cleanup() {
	if [[ -n $mock_pid ]]; then
		kill "$mock_pid" 2>/dev/null || true
		wait "$mock_pid" 2>/dev/null || true
	fi
	rm -rf "$DIR"
}
trap cleanup EXIT
export CHARGEFLOW_BIN_DIR=$DIR/bin
unset CHARGEFLOW_STRIPE_MOCK
version=$(sed -n 's/^readonly VERSION=//p' "$ENSURE")
want=$DIR/bin/stripe-mock-$version

built() { go version -m "$1" 2>/dev/null | awk '$1 == "mod" && $2 == "github.com/stripe/stripe-mock" { print $3 }'; }

out=$("$ENSURE" 2>"$DIR/err")
check "the first run prints the binary's path" test "$out" = "$want"
check "the first run says it installs" grep -q "installing github.com/stripe/stripe-mock@$version" "$DIR/err"
check "the binary was built from $version" test "$(built "$want")" = "$version"
check "no temporary folder is left" test -z "$(find "$DIR/bin" -name '.stripe-mock.*')"

out=$("$ENSURE" 2>"$DIR/err")
check "the second run prints the same path" test "$out" = "$want"
check "the second run installs nothing" test ! -s "$DIR/err"

cp "$(type -P true)" "$want"
out=$("$ENSURE" 2>"$DIR/err")
check "a binary of another version is replaced" test "$(built "$want")" = "$version"
check "and the path printed" test "$out" = "$want"

"$want" -http-addr 127.0.0.1:0 -https-addr 127.0.0.1:0 >"$DIR/mock" 2>&1 &
mock_pid=$!
for _ in $(seq 1 100); do
	grep -q 'Listening for HTTP at address' "$DIR/mock" && break
	sleep 0.1
done
port=$(sed -n 's/^Listening for HTTP at address: 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$DIR/mock")
check "the binary serves on loopback" port_answers "${port:-0}"

status=0
CHARGEFLOW_STRIPE_MOCK=$DIR/none "$ENSURE" >/dev/null 2>"$DIR/err" || status=$?
check "a CHARGEFLOW_STRIPE_MOCK that is no executable is refused" test "$status" = 1
check "naming it" grep -q "CHARGEFLOW_STRIPE_MOCK is $DIR/none" "$DIR/err"
out=$(CHARGEFLOW_STRIPE_MOCK=$want "$ENSURE" 2>/dev/null)
check "an executable CHARGEFLOW_STRIPE_MOCK is printed" test "$out" = "$want"

status=0
"$ENSURE" bogus >/dev/null 2>&1 || status=$?
check "an unknown argument exits 2" test "$status" = 2

summary
