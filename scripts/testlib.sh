# shellcheck shell=bash
# What the scripts' own tests share (scripts/*_test.sh source it): counted
# checks, a summary that is the exit status, and whether a loopback port
# answers.

passed=0 failed=0
ok() {
	passed=$((passed + 1))
	printf 'ok   %s\n' "$*"
}
not_ok() {
	failed=$((failed + 1))
	printf 'FAIL %s\n' "$*"
}
check() { # check DESCRIPTION COMMAND...
	local what=$1
	shift
	if "$@"; then ok "$what"; else not_ok "$what"; fi
}
# summary prints the counts under the test's NAME; its status is the test's.
summary() {
	echo "$NAME: $passed passed, $failed failed"
	((failed == 0))
}

port_answers() {
	# shellcheck disable=SC2016 # expanded by the inner bash
	timeout 2 bash -c ': <"/dev/tcp/127.0.0.1/$0"' "$1" >/dev/null 2>&1
}
port_silent() { ! port_answers "$1"; }
