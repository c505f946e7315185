-- Sessions of the operator's page (docs/architecture.md, "Operators"): an
-- operator signs in once with a token and the browser then carries a random
-- session id in a cookie. The sessions live here, not in an API process, so
-- that any process behind the load balancer serves any operator, and signing
-- out or revoking the operator ends the session everywhere at once.
--
-- Only sha256 of the session id is kept: whoever reads this table cannot
-- act as an operator. The page's CSRF token is an HMAC keyed by the session
-- id, so it needs no column and no key shared between processes.
CREATE TABLE operator_sessions (
    id_hash     bytea PRIMARY KEY CHECK (length(id_hash) = 32),
    operator_id text NOT NULL REFERENCES operators (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL CHECK (expires_at > created_at)
);

-- Every sign-in deletes the sessions that expired.
CREATE INDEX operator_sessions_expires_at ON operator_sessions (expires_at);
-- A new token for an operator ends the operator's sessions.
CREATE INDEX operator_sessions_operator ON operator_sessions (operator_id);
