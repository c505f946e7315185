//go:build lab

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// Authorize now, capture later through the CLI, in both provider
// protocols: charge create --no-capture --wait ends in requires_capture;
// charge capture takes part of it, and the key it printed, reused,
// replays that capture instead of making another; the charge is succeeded
// with what was captured. A second held charge is released by charge
// cancel, after which a capture of it is refused with the API's code and
// the exit code of a refusal.
func TestChargeCaptureAndCancelThroughTheCLI(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"fake", "stripe"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			var s *system
			var stripeEnv []string
			if protocol == "stripe" {
				s, stripeEnv = startStripeSystem(t)
			} else {
				s = startSystem(t)
			}
			s.startWorker(stripeEnv...)
			env := map[string]string{"CHARGEFLOW_API_URL": s.apiURL, "CHARGEFLOW_API_KEY": s.apiKey}
			type resource struct {
				ID             string `json:"id"`
				Object         string `json:"object"`
				Status         string `json:"status"`
				Charge         string `json:"charge"`
				Amount         int64  `json:"amount"`
				Capture        *bool  `json:"capture"`
				AmountCaptured int64  `json:"amount_captured"`
			}
			decode := func(out string) resource {
				t.Helper()
				var r resource
				require.NoError(t, json.Unmarshal([]byte(out), &r), out)
				return r
			}

			held := decode(runInProcess(t, env, "charge", "create", "--amount", "1000", "--no-capture", "--wait"))
			require.Equal(t, "requires_capture", held.Status)
			require.NotNil(t, held.Capture)
			require.False(t, *held.Capture)

			var stderr bytes.Buffer
			args := []string{"charge", "capture", held.ID, "--amount", "600", "--wait"}
			out := runCaptured(t, env, &stderr, args...)
			capture := decode(out)
			require.Regexp(t, `^cp_`, capture.ID)
			require.Equal(t, "capture", capture.Object)
			require.Equal(t, "succeeded", capture.Status)
			require.Equal(t, held.ID, capture.Charge)
			require.Equal(t, int64(600), capture.Amount)
			key := regexp.MustCompile(`idempotency key: (\S+)`).FindStringSubmatch(stderr.String())
			require.Len(t, key, 2, stderr.String())
			again := decode(runInProcess(t, env, append(args, "--key", key[1])...))
			require.Equal(t, capture.ID, again.ID, "the printed key, reused, is the same capture")

			charge := decode(runInProcess(t, env, "charge", "get", held.ID))
			require.Equal(t, "succeeded", charge.Status)
			require.Equal(t, int64(600), charge.AmountCaptured)

			released := decode(runInProcess(t, env, "charge", "create", "--amount", "1000", "--no-capture", "--wait"))
			require.Equal(t, "requires_capture", released.Status)
			cancel := decode(runInProcess(t, env, "charge", "cancel", released.ID, "--wait"))
			require.Regexp(t, `^cx_`, cancel.ID)
			require.Equal(t, "cancel", cancel.Object)
			require.Equal(t, "succeeded", cancel.Status)
			require.Equal(t, "canceled", decode(runInProcess(t, env, "charge", "get", released.ID)).Status)

			stderr.Reset()
			err := run(context.Background(), []string{"charge", "capture", released.ID}, func(k string) string { return env[k] }, &bytes.Buffer{}, &stderr)
			require.Error(t, err)
			require.Equal(t, exitRefused, exitCode(err))
			require.Contains(t, err.Error(), "409 charge_not_capturable")
			var n int
			require.NoError(t, s.pool.QueryRow(context.Background(),
				`SELECT count(*) FROM charges WHERE kind IN ('capture', 'cancel')`).Scan(&n))
			require.Equal(t, 2, n, "one capture, one cancel: the replay and the refusal made none")
		})
	}
}
