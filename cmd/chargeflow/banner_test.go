//go:build lab

package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// banner is what `chargeflow all` prints for the user to paste.
type banner struct {
	apiURL, apiKey, operatorToken, idempotencyKey, chargeBody string
}

// waitBanner waits for p's banner and reads it.
func waitBanner(t *testing.T, p *process) banner {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(p.stdout.String(), "Other test cards:") }, 30*time.Second, 10*time.Millisecond,
		"no banner in:\n%s", p.stdout.String())
	printed := p.stdout.String()
	find := func(pattern string) string {
		t.Helper()
		m := regexp.MustCompile(pattern).FindStringSubmatch(printed)
		require.NotNil(t, m, "no %s in:\n%s", pattern, printed)
		return m[1]
	}
	return banner{
		apiURL:         find(`export CHARGEFLOW_API_URL=(\S+)`),
		apiKey:         find(`export CHARGEFLOW_API_KEY=(\S+)`),
		operatorToken:  find(`export CHARGEFLOW_OPERATOR_TOKEN=(\S+)`),
		idempotencyKey: find(`-H "Idempotency-Key: (\S+)"`),
		chargeBody:     find(`-d '([^']+)'`),
	}
}
