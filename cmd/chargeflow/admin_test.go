package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/chargeflow/chargeflow/internal/dbtest"
)

// An administrator's day, end to end against real API processes: tenants
// listed, a key rotated with an overlap (both keys work), the old one
// revoked (it stops), an operator created and revoked (their token stops),
// and every change, and only the changes, in the admin audit under the
// actor, with no secret in it.
func TestAdministration(t *testing.T) {
	t.Parallel()
	dbURL := dbtest.URL(t)
	envOf := map[string]string{"DATABASE_URL": dbURL, "USER": "alice"}
	admin := func(args ...string) map[string]any {
		t.Helper()
		out := runInProcess(t, envOf, append(args, "--output", "json")...)
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &v), "chargeflow %s: %s", strings.Join(args, " "), out)
		return v
	}
	refused := func(want int, args ...string) {
		t.Helper()
		var stderr bytes.Buffer
		err := run(context.Background(), args, func(k string) string { return envOf[k] }, &bytes.Buffer{}, &stderr)
		require.Equal(t, want, exitCode(err), "chargeflow %s: %v", strings.Join(args, " "), err)
	}
	startAPI := func() string {
		t.Helper()
		return start(t, []string{"DATABASE_URL=" + dbURL, "PSP_URL=http://127.0.0.1:1"}, "api", "--addr", "127.0.0.1:0").listenAddr()
	}
	status := func(base, path, bearer string) int {
		t.Helper()
		code, _, err := getStatus(base+path, bearer)
		require.NoError(t, err)
		return code
	}

	created := admin("tenant", "create", "--name", "acme")
	tenantID, key1 := created["tenant_id"].(string), created["api_key"].(string)
	listed := admin("tenant", "list")["data"].([]any)
	require.Len(t, listed, 1)
	require.Equal(t, map[string]any{"id": tenantID, "name": "acme", "active_keys": 1.0}, pick(listed[0], "id", "name", "active_keys"))

	api := startAPI()
	require.Equal(t, http.StatusOK, status(api, "/v1/charges", key1))

	rotated := admin("tenant", "rotate-key", tenantID, "--overlap", "1h")
	key2 := rotated["api_key"].(string)
	require.NotEqual(t, key1, key2)
	require.Len(t, rotated["ending"], 1)
	require.Equal(t, http.StatusOK, status(api, "/v1/charges", key2), "the new key works")
	require.Equal(t, http.StatusOK, status(api, "/v1/charges", key1), "the old one too, during the overlap")
	keys := admin("tenant", "keys", tenantID)["data"].([]any)
	require.Len(t, keys, 2)
	for _, k := range keys {
		require.Equal(t, true, k.(map[string]any)["active"])
	}
	oldKeyID := keys[1].(map[string]any)["id"].(string)
	require.Equal(t, rotated["ending"].([]any)[0], oldKeyID)

	admin("tenant", "revoke-key", tenantID, oldKeyID)
	refused(exitNotFound, "tenant", "revoke-key", tenantID, oldKeyID)
	refused(exitNotFound, "tenant", "rotate-key", "tn_01m8vq2jb81v9s1tm5ee58zbc8")
	refused(exitUsage, "tenant", "rotate-key", tenantID, "--overlap", "-1h")

	operator := admin("operator", "create", "--name", "bob", "--role", "viewer")
	token := operator["token"].(string)
	require.Equal(t, http.StatusOK, status(api, "/ops/v1/charges", token))
	refused(exitRefused, "operator", "create", "--name", "bob", "--role", "viewer")
	admin("operator", "revoke", "bob")
	refused(exitNotFound, "operator", "revoke", "bob")
	ops := admin("operator", "list")["data"].([]any)
	require.Len(t, ops, 1)
	require.NotNil(t, ops[0].(map[string]any)["revoked_at"])

	// A process that never trusted them: the revoked key and token are
	// refused, the new key works.
	fresh := startAPI()
	require.Equal(t, http.StatusUnauthorized, status(fresh, "/v1/charges", key1))
	require.Equal(t, http.StatusOK, status(fresh, "/v1/charges", key2))
	require.Equal(t, http.StatusUnauthorized, status(fresh, "/ops/v1/charges", token))

	entries := admin("audit")["data"].([]any)
	var actions []string
	for _, e := range entries {
		entry := e.(map[string]any)
		require.Equal(t, "cli:alice", entry["actor"])
		actions = append(actions, entry["action"].(string)+" "+entry["subject"].(string))
		for _, secret := range []string{key1, key2, token} {
			require.NotContains(t, entry["detail"], secret)
		}
	}
	require.Equal(t, []string{
		"operator.revoked " + operator["operator_id"].(string),
		"operator.created " + operator["operator_id"].(string),
		"api_key.revoked " + tenantID,
		"api_key.rotated " + tenantID,
		"tenant.created " + tenantID,
	}, actions, "each change once, newest first; no refusal recorded")
	require.WithinDuration(t, time.Now(), parseTime(t, entries[0].(map[string]any)["at"]), time.Minute)
}

// pick keeps the named members of a JSON object.
func pick(v any, names ...string) map[string]any {
	out := map[string]any{}
	for _, n := range names {
		out[n] = v.(map[string]any)[n]
	}
	return out
}

func parseTime(t *testing.T, v any) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, v.(string))
	require.NoError(t, err)
	return at
}
