package api

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// What a plane mounted on the server (Server.Mount) uses of the API's
// plumbing besides the problems (problem.go), the body readers and the
// text checks (request.go) and the listings (charges.go): the request log's
// facts, the clock and the body limit, and the failed-authentication limit
// a sign-in form shares with bearer credentials (authlimit.go).

// LogCharge names the charge a request is about in its log line and span.
func LogCharge(c echo.Context, id string) { c.Set(logChargeKey, id) }

// LogTenant names the tenant a request is about in its log line and span.
func LogTenant(c echo.Context, id string) { c.Set(logTenantKey, id) }

// LogOperator names the operator (its id, never its token) who sent a
// request, in its log line.
func LogOperator(c echo.Context, id string) { c.Set(logOperatorKey, id) }

// LogProblem records the problem a request was answered with, for its log
// line and the problems metric, when a plane renders it itself (a page)
// rather than returning it to the error handler.
func LogProblem(c echo.Context, p *Problem) { c.Set(logProblemKey, p) }

// Now is the server's clock (Config.Now).
func (s *Server) Now() time.Time { return s.cfg.Now() }

// MaxBodyBytes is the most a request body may hold (Config.MaxBodyBytes).
func (s *Server) MaxBodyBytes() int64 { return s.cfg.MaxBodyBytes }

// AuthFailureWait reports whether the address r came from has used up its
// failed authentications (Config.AuthFailureLimit), and for how long.
func (s *Server) AuthFailureWait(r *http.Request) (time.Duration, bool) {
	return s.authFailures.blocked(clientAddress(r), s.cfg.Now())
}

// AuthFailed counts a failed authentication against the address r came
// from.
func (s *Server) AuthFailed(r *http.Request) { s.authFailures.fail(clientAddress(r), s.cfg.Now()) }
