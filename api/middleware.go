package api

import (
	"cmp"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"
)

// Keys under which handlers leave facts for the request log.
const (
	logChargeKey  = "chargeflow.log.charge_id"
	logProblemKey = "chargeflow.log.problem"
	logReplayKey  = "chargeflow.log.replayed"
	// logReplayMemoryKey is set when the replay's record came from this
	// process's memory rather than from Postgres.
	logReplayMemoryKey = "chargeflow.log.replayed_from_memory"
	logTenantKey       = "chargeflow.log.tenant_id"
	// logOperatorKey is the operator's id (never the token) on /ops/ routes.
	logOperatorKey = "chargeflow.log.operator_id"
)

// logRequests writes one structured line per request, "METHOD /route
// STATUS" (the route's template, never the path a client sent), at DEBUG
// for the probes and /metrics and at INFO otherwise. It logs ids, route,
// status and timing only: never headers, bodies, keys or payment details.
func (s *Server) logRequests(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err) // writes the problem, and records it for the log line
		}
		status := c.Response().Status
		level := slog.LevelInfo
		attrs := []slog.Attr{
			slog.String("method", methodLabel(c.Request().Method)), // a client may send any token as its method
			slog.String("route", c.Path()),
			slog.Int("status", status),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		}
		if sc := trace.SpanContextFromContext(c.Request().Context()); sc.HasTraceID() {
			attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
		}
		if v, ok := c.Get(logTenantKey).(string); ok {
			attrs = append(attrs, slog.String("tenant_id", v))
		}
		if v, ok := c.Get(logChargeKey).(string); ok {
			attrs = append(attrs, slog.String("charge_id", v))
		}
		if v, ok := c.Get(logOperatorKey).(string); ok {
			attrs = append(attrs, slog.String("operator_id", v))
		}
		if v, ok := c.Get(logReplayKey).(bool); ok && v {
			attrs = append(attrs, slog.Bool("replayed", true))
		}
		if p, ok := c.Get(logProblemKey).(*Problem); ok {
			attrs = append(attrs, slog.String("problem", string(p.Code)))
			if p.Field != "" {
				// Only the top-level member: a deeper path could name a
				// metadata key, and metadata stays out of logs.
				attrs = append(attrs, slog.String("field", topLevel(p.Field)))
			}
			if p.Cause != nil {
				// Causes are our own errors (database, encoding), which never
				// quote request bodies or keys.
				attrs = append(attrs, slog.String("err", p.Cause.Error()))
			}
			if status >= 500 {
				level = slog.LevelError
			}
		}
		if level == slog.LevelInfo && quietRoutes[c.Path()] {
			level = slog.LevelDebug
		}
		msg := methodLabel(c.Request().Method) + " " + cmp.Or(c.Path(), "unmatched") + " " + strconv.Itoa(status)
		s.cfg.Logger.LogAttrs(c.Request().Context(), level, msg, attrs...)
		return nil
	}
}

// quietRoutes are asked every few seconds by machines; their lines are DEBUG.
var quietRoutes = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// topLevel cuts a field path to its first member: "metadata.order" → "metadata".
func topLevel(path string) string {
	if i := strings.IndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return path
}
