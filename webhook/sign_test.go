package webhook_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/webhook"
)

// The Standard Webhooks specification's own example: a receiver built on
// any of its libraries verifies what Sign makes.
func TestSignMatchesTheStandardWebhooksExample(t *testing.T) {
	t.Parallel()
	got, err := webhook.Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	require.NoError(t, err)
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", got)

	_, err = webhook.Sign("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_1", 1, nil)
	require.Error(t, err, "a secret without its prefix")
	secret := webhook.NewSecret()
	require.Regexp(t, `^whsec_[A-Za-z0-9+/]{32}$`, secret)
	require.NotEqual(t, secret, webhook.NewSecret())
}
