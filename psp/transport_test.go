package psp_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/psp/psptest"
)

// TestTimedOutCallIsAborted has a provider read a charge and never answer:
// when the call times out, the provider's end must see the connection
// reset, not closed. A reset is the kernel dropping what the call had not
// yet sent; a close would go on sending it, across a partition until its
// heal, after the reconciler proved the charge absent.
func TestTimedOutCallIsAborted(t *testing.T) {
	t.Parallel()
	url, ended := psptest.StartSilentServer(t)
	client := psp.NewClient(psp.Config{BaseURL: url, Timeout: 200 * time.Millisecond})
	_, err := client.Charge(t.Context(), visaRequest("pk_aborted"))
	require.ErrorIs(t, err, psp.ErrUnknownOutcome)
	select {
	case err := <-ended:
		require.True(t, errors.Is(err, syscall.ECONNRESET), "the provider saw %v, want a reset", err)
	case <-time.After(time.Minute):
		t.Fatal("the provider's connection never ended")
	}
}

// TestCallsAreHTTP1 checks that the transport does not take HTTP/2 from a
// provider that offers it: a cancelled HTTP/2 call resets its stream and
// leaves its bytes on a connection that lives on.
func TestCallsAreHTTP1(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	tr := psp.NewTransport()
	tr.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, "HTTP/1.1", string(body))
}
