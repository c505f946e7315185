package delivery_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/delivery"
	"github.com/chargeflow/chargeflow/event"
	"github.com/chargeflow/chargeflow/intent"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/internal/lockedbuf"
	"github.com/chargeflow/chargeflow/webhook"
)

// receiver is a merchant's webhook endpoint: it verifies every delivery as
// the Standard Webhooks scheme says, with its own code, and answers the
// statuses it is given, then 200.
type receiver struct {
	*httptest.Server
	secret   string
	mu       sync.Mutex
	statuses []int
	got      []delivered
}

type delivered struct {
	id, timestamp string
	valid         bool
	body          map[string]any
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	r := &receiver{statuses: statuses}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(r.secretOf(), "whsec_"))
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(req.Header.Get("webhook-id") + "." + req.Header.Get("webhook-timestamp") + "." + string(body)))
		want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
		var decoded map[string]any
		_ = json.Unmarshal(body, &decoded)
		r.mu.Lock()
		r.got = append(r.got, delivered{req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp"),
			hmac.Equal([]byte(want), []byte(req.Header.Get("webhook-signature"))), decoded})
		status := http.StatusOK
		if len(r.statuses) > 0 {
			status, r.statuses = r.statuses[0], r.statuses[1:]
		}
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) secretOf() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.secret
}

func (r *receiver) deliveries() []delivered {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivered(nil), r.got...)
}

// startWorkers runs the delivery worker in its queue on a real River
// client, with fast retries.
func startWorkers(t *testing.T, pool *pgxpool.Pool, allowPrivate bool) {
	t.Helper()
	startWorker(t, pool, delivery.Config{DB: pool, AllowPrivate: allowPrivate, Timeout: 2 * time.Second,
		BackoffBase: 5 * time.Millisecond, BackoffCap: 20 * time.Millisecond})
}

// startWorker runs the delivery worker of cfg in its queue on a real River
// client.
func startWorker(t *testing.T, pool *pgxpool.Pool, cfg delivery.Config) {
	t.Helper()
	worker, err := delivery.NewWorker(cfg)
	require.NoError(t, err)
	workers := river.NewWorkers()
	river.AddWorker(workers, worker)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{webhook.Queue: {MaxWorkers: 4}},
		Workers:           workers,
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		TestOnly:          true,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		cancel()
		stop, done := context.WithTimeout(context.Background(), 5*time.Second)
		defer done()
		_ = client.Stop(stop)
	})
}

// succeed settles a new charge of tenant, which writes its event and the
// event's deliveries.
func succeed(t *testing.T, pool *pgxpool.Pool, tenant string) intent.Charge {
	t.Helper()
	c := dbtest.PendingCharge(t, pool, dbtest.Charge{TenantID: tenant})
	for _, m := range []struct{ from, to intent.State }{{intent.StatePending, intent.StateSubmitting}, {intent.StateSubmitting, intent.StateSucceeded}} {
		_, err := intent.MoveCharge(context.Background(), pool, intent.Move{TenantID: tenant, ChargeID: c.ID, From: m.from, To: m.to,
			Actor: "test", Reason: "test", CountAttempt: m.to == intent.StateSubmitting, ProviderChargeID: "py_1"})
		require.NoError(t, err)
	}
	return c
}

func deliveryState(t *testing.T, pool *pgxpool.Pool, endpoint string) (state string, attempts int) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT state, attempts FROM webhook_deliveries WHERE endpoint_id = $1`, endpoint).Scan(&state, &attempts)
	require.NoError(t, err)
	return state, attempts
}

// A receiver failing twice gets the event a third time, signed, with the
// same webhook-id every time; the delivery log has the three attempts.
func TestDeliveryRetriesUntilDelivered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tenant := dbtest.Tenant(t, pool, "deliveries")
	r := newReceiver(t, 500, 503)
	endpoint := dbtest.WebhookEndpoint(t, pool, tenant, r.URL+"/hooks", []string{"charge.succeeded"})
	r.mu.Lock()
	r.secret = endpoint.Secret
	r.mu.Unlock()
	other := dbtest.WebhookEndpoint(t, pool, tenant, r.URL+"/refunds-only", []string{"refund.succeeded"})
	startWorkers(t, pool, true)

	charge := succeed(t, pool, tenant)
	require.Eventually(t, func() bool { state, _ := deliveryState(t, pool, endpoint.ID); return state == "delivered" }, 10*time.Second, 20*time.Millisecond)
	got := r.deliveries()
	require.Len(t, got, 3)
	for _, d := range got {
		require.True(t, d.valid, "every attempt is signed with the endpoint's secret")
		require.Equal(t, got[0].id, d.id, "the same webhook-id on every retry")
	}
	require.Equal(t, "charge.succeeded", got[2].body["type"])
	require.Equal(t, got[0].id, got[2].body["id"])
	require.Equal(t, charge.ID, got[2].body["data"].(map[string]any)["id"])

	logs, err := webhook.Log(ctx, pool, tenant, got[0].id)
	require.NoError(t, err)
	require.Len(t, logs, 1, "the refunds-only endpoint was not subscribed")
	var statuses []int
	for _, a := range logs[0].Attempts {
		statuses = append(statuses, *a.Status)
	}
	require.Equal(t, []int{500, 503, 200}, statuses)
	var deliveriesToOther int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, other.ID).Scan(&deliveriesToOther))
	require.Zero(t, deliveriesToOther)
}

// Without --webhooks-allow-private a delivery never connects to a private
// address, whatever the endpoint's URL said when it was made; failing for
// every attempt, it disables the endpoint. A deleted endpoint gets nothing.
func TestDeliveryRefusesPrivateAddressesAndDisables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tenant := dbtest.Tenant(t, pool, "ssrf")
	r := newReceiver(t)
	endpoint := dbtest.WebhookEndpoint(t, pool, tenant, r.URL+"/hooks", []string{"*"})
	deleted := dbtest.WebhookEndpoint(t, pool, tenant, r.URL+"/gone", []string{"*"})
	require.NoError(t, webhook.DeleteEndpoint(ctx, pool, tenant, deleted.ID))
	startWorkers(t, pool, false)

	succeed(t, pool, tenant)
	_, err := pool.Exec(ctx, `UPDATE river_job SET max_attempts = 5 WHERE kind = 'webhook.deliver'`) // a short day
	require.NoError(t, err)
	require.Eventually(t, func() bool { state, _ := deliveryState(t, pool, endpoint.ID); return state == "failed" }, 20*time.Second, 20*time.Millisecond)
	require.Empty(t, r.deliveries(), "nothing reached the private address")
	logs, err := webhook.Log(ctx, pool, tenant, mustEventID(t, pool, tenant, "charge.succeeded"))
	require.NoError(t, err)
	require.Len(t, logs, 1, "no delivery was decided for the deleted endpoint")
	require.NotEmpty(t, logs[0].Attempts)
	for _, a := range logs[0].Attempts {
		require.Equal(t, webhook.AttemptAddressNotAllowed, a.Error)
	}
	endpoints, _, err := webhook.Endpoints(ctx, pool, webhook.EndpointListParams{TenantID: tenant, Limit: 10})
	require.NoError(t, err)
	require.Len(t, endpoints, 1)
	require.NotNil(t, endpoints[0].DisabledAt)
	// The reason is what happened: five attempts (not the default forty),
	// over the span the log shows (not "more than a day").
	first, last := logs[0].Attempts[0].CreatedAt, logs[0].Attempts[len(logs[0].Attempts)-1].CreatedAt
	require.Len(t, logs[0].Attempts, 5)
	require.Equal(t, webhook.DisabledReason(5, last.Sub(first)), endpoints[0].DisabledReason)
	require.Regexp(t, `^a delivery failed all 5 of its attempts, made (within a second|over \d+ seconds?)$`, endpoints[0].DisabledReason)

	// A disabled endpoint is decided no more deliveries.
	succeed(t, pool, tenant)
	var decided int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1`, endpoint.ID).Scan(&decided))
	require.Equal(t, 1, decided)
}

func mustEventID(t *testing.T, pool *pgxpool.Pool, tenant, typ string) string {
	t.Helper()
	events, _, err := event.List(context.Background(), pool, event.ListParams{TenantID: tenant, Type: typ, Limit: 1})
	require.NoError(t, err)
	require.Len(t, events, 1)
	return events[0].ID
}

// An endpoint whose delivery fails every attempt is disabled, and the
// tenant's other endpoints subscribed to webhook_endpoint.disabled are told:
// signed with their own secret, the endpoint as its disabling left it and
// never its secret. The disabled endpoint is not sent its own disabling.
func TestDisabledEndpointIsAnnouncedToTheOthers(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	tenant := dbtest.Tenant(t, pool, "disabling")
	down := make([]int, webhook.MaxAttempts)
	for i := range down {
		down[i] = http.StatusServiceUnavailable
	}
	failing := newReceiver(t, down...)
	failingEndpoint := dbtest.WebhookEndpoint(t, pool, tenant, failing.URL+"/hooks", []string{"*"})
	failing.mu.Lock()
	failing.secret = failingEndpoint.Secret
	failing.mu.Unlock()
	told := newReceiver(t)
	toldEndpoint := dbtest.WebhookEndpoint(t, pool, tenant, told.URL+"/hooks", []string{event.TypeEndpointDisabled})
	told.mu.Lock()
	told.secret = toldEndpoint.Secret
	told.mu.Unlock()
	startWorkers(t, pool, true)

	succeed(t, pool, tenant)
	require.Eventually(t, func() bool { return len(told.deliveries()) > 0 }, 30*time.Second, 20*time.Millisecond)
	state, attempts := deliveryState(t, pool, failingEndpoint.ID)
	require.Equal(t, "failed", state)
	require.Equal(t, webhook.MaxAttempts, attempts)
	got := told.deliveries()
	require.Len(t, got, 1, "told once; the charge's event was not subscribed")
	require.True(t, got[0].valid, "signed with the told endpoint's secret")
	require.Equal(t, event.TypeEndpointDisabled, got[0].body["type"])
	require.Equal(t, got[0].id, got[0].body["id"])
	data := got[0].body["data"].(map[string]any)
	require.Equal(t, failingEndpoint.ID, data["id"])
	require.Equal(t, "disabled", data["status"])
	require.Regexp(t, `^a delivery failed all 40 of its attempts, made `, data["disabled_reason"])
	require.NotContains(t, data, "secret")
	require.Len(t, failing.deliveries(), webhook.MaxAttempts, "the disabled endpoint got the charge's event only, never its own disabling")
	for _, d := range failing.deliveries() {
		require.Equal(t, "charge.succeeded", d.body["type"])
	}
	require.Equal(t, got[0].id, mustEventID(t, pool, tenant, event.TypeEndpointDisabled))
}

// Every way an attempt fails is recorded in fixed words, one of
// webhook.AttemptErrors, through the real worker and real receivers: a
// closed port, a receiver that never answers, an untrusted certificate, a
// plain HTTP server behind an https URL, a connection closed without an
// answer. Go's error text goes to the worker's log, without the URL.
func TestAttemptErrorsAreFixedWords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.Pool(t)
	tenant := dbtest.Tenant(t, pool, "attempt-errors")

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedURL := "http://" + closed.Addr().String() + "/hooks?token=secret-token"
	require.NoError(t, closed.Close())
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	t.Cleanup(hanging.Close)
	t.Cleanup(func() { close(release) })
	untrusted := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(untrusted.Close)
	// A server that speaks plain HTTP at once, to a client expecting TLS.
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { plain.Close() })
	go func() {
		for {
			conn, err := plain.Accept()
			if err != nil {
				return
			}
			_, _ = conn.Read(make([]byte, 4096)) // the client's hello
			_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
			go func() { time.Sleep(time.Second); conn.Close() }()
		}
	}()
	hangUp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(hangUp.Close)

	want, urls := map[string]string{}, map[string]string{}
	for url, code := range map[string]string{
		closedURL:                          webhook.AttemptConnectionFailed,
		hanging.URL + "/hooks":             webhook.AttemptTimeout,
		untrusted.URL + "/hooks":           webhook.AttemptTLSFailed,
		"https://" + plain.Addr().String(): webhook.AttemptTLSFailed,
		hangUp.URL + "/hooks":              webhook.AttemptNoResponse,
	} {
		id := dbtest.WebhookEndpoint(t, pool, tenant, url, []string{"*"}).ID
		want[id], urls[id] = code, url
	}
	succeed(t, pool, tenant)
	_, err = pool.Exec(ctx, `UPDATE river_job SET max_attempts = 1 WHERE kind = 'webhook.deliver'`) // one attempt each
	require.NoError(t, err)
	// A timeout that a TLS handshake under the race detector on a busy
	// machine stays well within.
	var logs lockedbuf.Buffer
	startWorker(t, pool, delivery.Config{DB: pool, AllowPrivate: true, Timeout: 5 * time.Second,
		BackoffBase: 5 * time.Millisecond, BackoffCap: 20 * time.Millisecond, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	for id := range want {
		require.Eventually(t, func() bool { state, _ := deliveryState(t, pool, id); return state == "failed" }, 20*time.Second, 20*time.Millisecond)
	}
	deliveryLog, err := webhook.Log(ctx, pool, tenant, mustEventID(t, pool, tenant, "charge.succeeded"))
	require.NoError(t, err)
	require.Len(t, deliveryLog, len(want))
	for _, d := range deliveryLog {
		require.Len(t, d.Attempts, 1)
		for _, a := range d.Attempts {
			require.Nil(t, a.Status)
			require.Equal(t, want[d.EndpointID], a.Error, "attempt %d to %s", a.Attempt, urls[d.EndpointID])
		}
	}
	require.Contains(t, logs.String(), `"cause":`, "the cause is logged")
	require.NotContains(t, logs.String(), "secret-token", "never the URL")
}

// Go's errors map to the fixed words: a resolver's error never shows its
// server or whether the name exists.
func TestDescribe(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&net.DNSError{Err: "no such host", Name: "a.example", Server: "10.255.255.53:53", IsNotFound: true}, webhook.AttemptHostNotResolved},
		{&net.DNSError{Err: "server misbehaving", Name: "a.example", Server: "10.255.255.53:53"}, webhook.AttemptHostNotResolved},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}, webhook.AttemptConnectionFailed},
		{&net.OpError{Op: "dial", Net: "tcp", Err: webhook.Policy{}.Control()("tcp", "10.0.0.1:443", nil)}, webhook.AttemptAddressNotAllowed},
		{&net.OpError{Op: "dial", Net: "tcp", Err: webhook.Policy{}.Control()("tcp", "93.184.215.14:22", nil)}, webhook.AttemptAddressNotAllowed},
		{context.DeadlineExceeded, webhook.AttemptTimeout},
		{&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, webhook.AttemptTLSFailed},
		{tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, webhook.AttemptTLSFailed},
		{&net.OpError{Op: "remote error", Err: errors.New("tls: handshake failure")}, webhook.AttemptTLSFailed},
		{errors.New("http: server gave HTTP response to HTTPS client"), webhook.AttemptTLSFailed},
		{io.ErrUnexpectedEOF, webhook.AttemptNoResponse},
		{io.EOF, webhook.AttemptNoResponse},
	} {
		got, cause := delivery.Describe(&url.Error{Op: "Post", URL: "https://a.example/?token=t", Err: tc.err})
		require.Equal(t, tc.want, got, "%v", tc.err)
		require.Contains(t, webhook.AttemptErrors, got)
		require.NotContains(t, cause.Error(), "token=t", "the cause without the URL")
	}
}

// A worker with no port to deliver to, or port 0, does not start.
func TestNewWorkerRefusesBadPorts(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	for _, ports := range [][]uint16{{}, {0}, {443, 0}} {
		_, err := delivery.NewWorker(delivery.Config{DB: pool, Ports: ports})
		require.ErrorContains(t, err, "webhook ports", "%v", ports)
	}
	_, err := delivery.NewWorker(delivery.Config{DB: pool, Ports: []uint16{9443}})
	require.NoError(t, err)
}

// A failing delivery's next attempt counts from the attempt's start by the
// database's clock when that is later than the worker's (a worker whose
// clock is behind), else from the worker's clock (docs/operations.md,
// "Clocks").
func TestNextRetryCountsFromTheLaterClock(t *testing.T) {
	t.Parallel()
	worker, err := delivery.NewWorker(delivery.Config{DB: dbtest.Pool(t), BackoffBase: 10 * time.Second, BackoffCap: time.Hour})
	require.NoError(t, err)
	later, earlier := time.Now().Add(2*time.Hour), time.Now().Add(-2*time.Hour)
	for attempt, want := range map[int]time.Duration{1: 10 * time.Second, 3: 40 * time.Second, 30: time.Hour} {
		job := &river.Job[webhook.DeliverArgs]{JobRow: &rivertype.JobRow{Attempt: attempt, AttemptedAt: &later}}
		got := worker.NextRetry(job).Sub(later)
		require.InDelta(t, want.Seconds(), got.Seconds(), want.Seconds()*0.11, "attempt %d", attempt)
		job.AttemptedAt = &earlier
		got = time.Until(worker.NextRetry(job))
		require.InDelta(t, want.Seconds(), got.Seconds(), want.Seconds()*0.11+0.5, "attempt %d", attempt)
	}
}
