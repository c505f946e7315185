package webhook_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"chargeflow/webhook"
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

func TestCheckURL(t *testing.T) {
	t.Parallel()
	resolves := func(addrs ...string) func(context.Context, string) ([]netip.Addr, error) {
		return func(context.Context, string) ([]netip.Addr, error) {
			var out []netip.Addr
			for _, a := range addrs {
				out = append(out, netip.MustParseAddr(a))
			}
			return out, nil
		}
	}
	public := resolves("93.184.215.14")
	for _, tc := range []struct {
		url     string
		lookup  func(context.Context, string) ([]netip.Addr, error)
		private error // the error without allowPrivate; nil = accepted
		invalid bool  // refused even with allowPrivate
	}{
		{"https://merchant.example/hooks", public, nil, false},
		{"http://93.184.215.14:8443/hooks?token=x", public, nil, false},
		{"ftp://merchant.example/hooks", public, nil, true},
		{"/hooks", public, nil, true},
		{"https://user:pass@merchant.example/hooks", public, nil, true},
		{"https://merchant.example/hooks#frag", public, nil, true},
		{"http://127.0.0.1:9000/hooks", public, webhook.ErrPrivateAddress, false},
		{"http://[::1]/hooks", public, webhook.ErrPrivateAddress, false},
		{"http://169.254.169.254/latest/meta-data", public, webhook.ErrPrivateAddress, false},
		{"http://10.1.2.3/hooks", public, webhook.ErrPrivateAddress, false},
		{"http://192.168.1.1/hooks", public, webhook.ErrPrivateAddress, false},
		{"http://100.64.0.1/hooks", public, webhook.ErrPrivateAddress, false},
		{"http://0.0.0.0/hooks", public, webhook.ErrPrivateAddress, false},
		{"http://[fd00::1]/hooks", public, webhook.ErrPrivateAddress, false},
		{"http://[::ffff:127.0.0.1]/hooks", public, webhook.ErrPrivateAddress, false},
		{"https://internal.example/hooks", resolves("93.184.215.14", "10.0.0.5"), webhook.ErrPrivateAddress, false},
		{"https://nowhere.example/hooks", func(context.Context, string) ([]netip.Addr, error) { return nil, errors.New("no such host") }, errors.New("x"), false},
	} {
		err := webhook.CheckURL(t.Context(), tc.url, false, tc.lookup)
		switch {
		case tc.invalid:
			require.Error(t, err, tc.url)
			require.Error(t, webhook.CheckURL(t.Context(), tc.url, true, tc.lookup), tc.url)
			continue
		case tc.private == nil:
			require.NoError(t, err, tc.url)
		case errors.Is(tc.private, webhook.ErrPrivateAddress):
			require.ErrorIs(t, err, webhook.ErrPrivateAddress, tc.url)
		default:
			require.Error(t, err, tc.url)
		}
		require.NoError(t, webhook.CheckURL(t.Context(), tc.url, true, tc.lookup), "allowed with allowPrivate: %s", tc.url)
	}
}
