// Package opsplane is the operator plane (docs/operations.md,
// "Operators"): the JSON API at /ops/v1 (ops.go), for programs with an
// operator token, and the operator's web page at /ops/ (page.go, signing in
// in session.go, the administration page in admin.go, templates in page/),
// for people with a browser. Both only parse, call and render: every action
// on a charge is package resolve's — a forced lookup, a resolution held to
// the provider's records —, every action on tenants' keys, operators,
// provider accounts and routes is package admin's, with its admin audit
// record (a route's entries read by route.ParseEntries, as the CLI reads
// them), and the counts by state are package census's. It is mounted on
// the merchant API's server (api.Server.Mount), so every route shares its
// middleware, its request log and its one mapping of errors to problems.
package opsplane

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/admin"
	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/census"
	"github.com/chargeflow/chargeflow/resolve"
)

// Config is everything the operator plane needs. Zero values take the
// defaults.
type Config struct {
	// DB is where operators, sessions and charges are read.
	DB *pgxpool.Pool
	// Resolve carries out the operators' actions. Required.
	Resolve *resolve.Resolver
	// Census counts charges by state for the page. Required.
	Census *census.Census
	// Admin carries out the administration page's actions on tenants'
	// keys and operators, each with its admin audit record. Required.
	Admin *admin.Service
	// SessionTTL is how long a sign-in to the operator's page lasts, from
	// the sign-in: the operator then signs in again. Default 12 h.
	SessionTTL time.Duration
	// SecureCookie marks the page's session cookie Secure even on a plain
	// HTTP request, for an API behind a proxy that ends TLS. A request
	// that came over TLS always gets a Secure cookie.
	SecureCookie bool
	// JobsUI serves River's job UI to signed-in operators at /ops/jobs/;
	// requests reach it with their full path. internal/app builds it, so
	// this package knows nothing of its maker. Nil serves a page saying
	// that this process has none.
	JobsUI http.Handler
}

// Defaults is the configuration New fills zero fields from.
func Defaults() Config { return Config{SessionTTL: 12 * time.Hour} }

// Plane is the operator plane, to mount on an API server.
type Plane struct {
	cfg   Config
	pages *pages
	// api is the server the plane is mounted on: its clock, body limit,
	// database timeout and failed-authentication limit are the plane's.
	api         *api.Server
	crossOrigin *http.CrossOriginProtection
}

// New fills in defaults, refuses a configuration that makes no sense and
// parses the page's templates.
func New(cfg Config) (*Plane, error) {
	if cfg.DB == nil || cfg.Resolve == nil || cfg.Census == nil || cfg.Admin == nil {
		return nil, errors.New("opsplane: DB, Resolve, Census and Admin are required")
	}
	cfg.SessionTTL = cmp.Or(cfg.SessionTTL, Defaults().SessionTTL)
	if cfg.SessionTTL < 0 {
		return nil, fmt.Errorf("opsplane: operator session TTL %s is negative", cfg.SessionTTL)
	}
	pages, err := newPages()
	if err != nil {
		return nil, err
	}
	return &Plane{cfg: cfg, pages: pages,
		// Browsers say where a request comes from; programs say nothing
		// and pass (they hold no session cookie to abuse).
		crossOrigin: http.NewCrossOriginProtection(),
	}, nil
}

// Routes registers the plane on s's Echo; pass it to s.Mount.
func (p *Plane) Routes(e *echo.Echo, s *api.Server) {
	p.api = s

	// The JSON API: operator tokens only; every action is in the charge's
	// audit trail (ops.go).
	ops := e.Group("/ops/v1", s.LimitAuthFailures, p.authenticateOperator)
	ops.GET("/charges", p.opsListCharges)
	ops.GET("/charges/:id", p.opsGetCharge)
	ops.POST("/charges/:id/reconcile", p.opsReconcile, requireAdmin)
	ops.POST("/charges/:id/resolve", p.opsResolve, requireAdmin)

	// The operator's page, for people (page.go): signed in once with an
	// operator token, then a session cookie; every form carries a CSRF
	// token, and every action is the JSON API's own resolveCharge or
	// reconcileCharge, or package admin's (admin.go).
	page := e.Group("/ops", pageHeaders(pageCSP), p.pageErrors, p.sameOrigin)
	// A browser pointed at the API's root is a person: send them to the
	// page. Clients call /v1 and never ask for /.
	e.GET("/", redirectTo("/ops/"), pageHeaders(pageCSP))
	page.GET("", redirectTo("/ops/"))
	page.GET("/ops.css", p.pageStyle)
	page.GET("/sign-in", p.pageSignInForm)
	page.POST("/sign-in", p.pageSignIn)
	page.POST("/sign-out", p.pageSignOut, p.signedIn, p.checkCSRF)
	page.GET("/", p.pageHome, p.signedIn)
	page.GET("/charges/:id", p.pageCharge, p.signedIn)
	page.POST("/charges/:id/resolve", p.pageResolve, p.signedIn, p.checkCSRF, requireAdmin)
	page.POST("/charges/:id/reconcile", p.pageReconcile, p.signedIn, p.checkCSRF, requireAdmin)
	page.GET("/admin", p.pageAdmin, p.signedIn)
	page.POST("/admin/tenants/:tenant/rotate-key", p.pageRotateKey, p.signedIn, p.checkCSRF, requireAdmin)
	page.POST("/admin/tenants/:tenant/keys/:key/revoke", p.pageRevokeKey, p.signedIn, p.checkCSRF, requireAdmin)
	page.POST("/admin/operators/revoke", p.pageRevokeOperator, p.signedIn, p.checkCSRF, requireAdmin)
	page.POST("/admin/accounts", p.pageAddAccount, p.signedIn, p.checkCSRF, requireAdmin)
	page.POST("/admin/accounts/disable", p.pageDisableAccount, p.signedIn, p.checkCSRF, requireAdmin)
	page.POST("/admin/tenants/:tenant/route", p.pageSetRoute, p.signedIn, p.checkCSRF, requireAdmin)
	page.POST("/admin/tenants/:tenant/route/clear", p.pageClearRoute, p.signedIn, p.checkCSRF, requireAdmin)
	page.GET("/jobs", redirectTo("/ops/jobs/"))
	page.Any("/jobs/*", p.pageJobs, pageHeaders(jobsCSP), p.signedIn, viewersOnlyRead)
}
