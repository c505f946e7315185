package api_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/apitest"
)

// A method a path does not serve is 405 with Allow, as problem+json, for
// every route, before authentication (the route list is public); a path
// that serves nothing stays 404.
func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const id = "ch_01m8mdx3p6yj8wvvgvpy8dykhz"
	for _, tt := range []struct {
		method, path, allow string
	}{
		{http.MethodDelete, "/healthz", "GET, HEAD"},
		{http.MethodPost, "/readyz", "GET, HEAD"},
		{http.MethodOptions, "/healthz", "GET, HEAD"},
		{http.MethodPut, "/openapi.yaml", "GET"},
		{http.MethodPut, "/v1/charges", "GET, POST"},
		{http.MethodDelete, "/v1/charges", "GET, POST"},
		{http.MethodHead, "/v1/charges", "GET, POST"},
		{"BREW", "/v1/charges", "GET, POST"},
		{http.MethodDelete, "/v1/charges/" + id, "GET"},
		{http.MethodPatch, "/v1/charges/" + id + "/events", "GET"},
	} {
		for _, headers := range [][]string{nil, {"Authorization", "Bearer " + b.TenantA.Key}} {
			resp := b.Request(t, tt.method, tt.path, "", headers...)
			if tt.method == http.MethodHead { // the answer to HEAD has no body
				require.Equal(t, http.StatusMethodNotAllowed, resp.Status)
				require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
			} else {
				apitest.RequireProblem(t, resp, http.StatusMethodNotAllowed, api.CodeMethodNotAllowed)
			}
			require.Equal(t, tt.allow, resp.Header.Get("Allow"), "%s %s", tt.method, tt.path)
		}
	}
	apitest.RequireProblem(t, b.Request(t, http.MethodDelete, "/nope", ""), http.StatusNotFound, api.CodeNotFound)
	apitest.RequireProblem(t, b.Get(t, b.TenantA, "/v1/nope"), http.StatusNotFound, api.CodeNotFound)
	apitest.RequireProblem(t, b.Get(t, b.TenantA, "/v1/charges/"+id+"/nope"), http.StatusNotFound, api.CodeNotFound)
	require.Equal(t, stored{}, b.Stored(t))
	require.Contains(t, b.Logs.String(), `"problem":"method_not_allowed"`, "refusals are logged like any other")
}

// Probes may send HEAD: /healthz and /readyz answer it as they answer GET,
// without a body.
func TestHeadProbes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		resp := b.Request(t, http.MethodHead, path, "")
		require.Equal(t, http.StatusOK, resp.Status, path)
		require.Empty(t, resp.Body)
	}

	notReady := setup(t, func(o *setupOpts) {
		o.API = func(c *api.Config) {
			c.Ready = func(context.Context) error { return context.DeadlineExceeded }
		}
	})
	resp := notReady.Request(t, http.MethodHead, "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, resp.Status)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
}

// A POST body must say it is JSON, once: a missing, doubled, non-JSON or
// non-UTF-8 Content-Type is 415, and nothing is stored.
func TestContentTypeIsRequired(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "content-type-key-00001"
	auth := "Bearer " + b.TenantA.Key
	for name, headers := range map[string][]string{
		"Missing":           {"Authorization", auth, "Idempotency-Key", key},
		"Empty":             {"Authorization", auth, "Idempotency-Key", key, "Content-Type", ""},
		"Doubled":           {"Authorization", auth, "Idempotency-Key", key, "Content-Type", "application/json", "Content-Type", "application/json"},
		"DoubledInOneValue": {"Authorization", auth, "Idempotency-Key", key, "Content-Type", "application/json, application/json"},
		"TextPlain":         {"Authorization", auth, "Idempotency-Key", key, "Content-Type", "text/plain"},
		"Form":              {"Authorization", auth, "Idempotency-Key", key, "Content-Type", "application/x-www-form-urlencoded"},
		"Latin1":            {"Authorization", auth, "Idempotency-Key", key, "Content-Type", "application/json; charset=iso-8859-1"},
		"Malformed":         {"Authorization", auth, "Idempotency-Key", key, "Content-Type", "application/json; charset"},
	} {
		resp := b.Request(t, http.MethodPost, "/v1/charges", apitest.ValidBody, headers...)
		apitest.RequireProblem(t, resp, http.StatusUnsupportedMediaType, api.CodeUnsupportedMediaType)
		require.Equal(t, stored{}, b.Stored(t), name)
	}

	// JSON, said once, in any of its spellings, is accepted.
	resp := b.Request(t, http.MethodPost, "/v1/charges", apitest.ValidBody,
		"Authorization", auth, "Idempotency-Key", key, "Content-Type", "Application/JSON; charset=UTF-8")
	require.Equal(t, http.StatusCreated, resp.Status, "body: %s", resp.Body)
}

// Headers over the API's limit are a problem+json 431, from a real HTTP
// server, before anything is looked at; headers under it pass.
func TestHeadersTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := strings.Repeat("x", api.MaxHeaderBytes)
	resp := b.Post(t, b.TenantA, "large-header-key-0001", apitest.ValidBody, "X-Padding", big)
	p := apitest.RequireProblem(t, resp, http.StatusRequestHeaderFieldsTooLarge, api.CodeHeadersTooLarge)
	require.NotContains(t, p["detail"], "xxx", "the problem does not quote the headers")
	apitest.RequireProblem(t, b.Request(t, http.MethodGet, "/healthz", "", "X-Padding", big), http.StatusRequestHeaderFieldsTooLarge, api.CodeHeadersTooLarge)
	// Many small headers count as much as one large one.
	var many []string
	for range 100 {
		many = append(many, "X-Padding", strings.Repeat("y", api.MaxHeaderBytes/100))
	}
	apitest.RequireProblem(t, b.Request(t, http.MethodGet, "/healthz", "", many...), http.StatusRequestHeaderFieldsTooLarge, api.CodeHeadersTooLarge)
	require.Equal(t, stored{}, b.Stored(t))

	fits := b.Post(t, b.TenantA, "large-header-key-0001", apitest.ValidBody, "X-Padding", strings.Repeat("x", api.MaxHeaderBytes/2))
	require.Equal(t, http.StatusCreated, fits.Status, "body: %s", fits.Body)
}

// A panic in a handler is a 500 problem+json, logged, not a dropped
// connection.
func TestPanicIsInternalError(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) {
		o.API = func(c *api.Config) {
			c.Ready = func(context.Context) error { panic("readiness check exploded 4111111111111111") }
		}
	})
	resp := b.Request(t, http.MethodGet, "/readyz", "")
	apitest.RequireProblem(t, resp, http.StatusInternalServerError, api.CodeInternal)
	require.NotContains(t, string(resp.Body), "exploded", "the cause is never sent")
	logs := b.Logs.String()
	require.Contains(t, logs, "readiness check exploded", "the cause is logged")
	apitest.RequireNoCardNumbers(t, "the logs", []byte(logs))
}

// A body cut short by the client is the client's 400, not a 503 that
// blames the database (an EOF looks like a lost connection), and stores
// nothing.
func TestIncompleteBody(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = fmt.Fprintf(conn, "POST /v1/charges HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer %s\r\n"+
		"Idempotency-Key: incomplete-body-key-01\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		b.TenantA.Key, len(apitest.ValidBody), apitest.ValidBody[:20])
	require.NoError(t, err)
	require.NoError(t, conn.(*net.TCPConn).CloseWrite(), "hang up mid-body")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	apitest.RequireProblem(t, response{Status: resp.StatusCode, Header: resp.Header, Body: body}, http.StatusBadRequest, api.CodeIncompleteBody)
	require.Equal(t, stored{}, b.Stored(t))
	require.Contains(t, b.Logs.String(), `"problem":"incomplete_body"`)
}
