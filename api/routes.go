package api

import (
	"github.com/labstack/echo/v4"
)

// routes is the whole API surface.
func (s *Server) routes(e *echo.Echo) {
	e.Use(s.instrument, s.logRequests, s.protocol)

	e.GET("/healthz", s.healthz)
	e.HEAD("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.HEAD("/readyz", s.readyz)
	e.GET("/openapi.yaml", serveOpenAPI)
	e.GET("/metrics", s.serveMetrics)

	// The provider's notifications: signed by the provider, not a tenant
	// (notifications.go).
	e.POST("/v1/provider_webhooks/:psp", s.providerWebhook)

	v1 := e.Group("/v1", s.limitAuthFailures, s.authenticate)
	v1.POST("/charges", s.createCharge)
	v1.GET("/charges", s.listCharges)
	v1.GET("/charges/:id", s.getCharge)
	v1.GET("/charges/:id/events", s.listEvents)
	v1.GET("/charges/:id/refunds", s.listRefunds)
	v1.POST("/refunds", s.createRefund)
	v1.GET("/refunds/:id", s.getRefund)
	v1.GET("/events", s.listNotifications)
	v1.GET("/events/:id", s.getNotification)
	v1.GET("/events/:id/deliveries", s.listDeliveries)
	v1.POST("/webhook_endpoints", s.createEndpoint)
	v1.GET("/webhook_endpoints", s.listEndpoints)
	v1.DELETE("/webhook_endpoints/:id", s.deleteEndpoint)

	// The operator plane: operator tokens only; every action is audited in
	// the charge's events (ops.go).
	ops := e.Group("/ops/v1", s.limitAuthFailures, s.authenticateOperator)
	ops.GET("/charges", s.opsListCharges)
	ops.GET("/charges/:id", s.opsGetCharge)
	ops.POST("/charges/:id/reconcile", s.opsReconcile, requireAdmin)
	ops.POST("/charges/:id/resolve", s.opsResolve, requireAdmin)

	// The operator's page, for people (opspage.go): signed in once with an
	// operator token, then a session cookie; every form carries a CSRF
	// token, and every action is the JSON API's own resolveCharge or
	// reconcileCharge.
	page := e.Group("/ops", pageHeaders(pageCSP), s.pageErrors, s.sameOrigin)
	page.GET("", redirectTo("/ops/"))
	page.GET("/ops.css", s.pageStyle)
	page.GET("/sign-in", s.pageSignInForm)
	page.POST("/sign-in", s.pageSignIn)
	page.POST("/sign-out", s.pageSignOut, s.signedIn, s.checkCSRF)
	page.GET("/", s.pageHome, s.signedIn)
	page.GET("/charges/:id", s.pageCharge, s.signedIn)
	page.POST("/charges/:id/resolve", s.pageResolve, s.signedIn, s.checkCSRF, requireAdmin)
	page.POST("/charges/:id/reconcile", s.pageReconcile, s.signedIn, s.checkCSRF, requireAdmin)
	page.GET("/jobs", redirectTo("/ops/jobs/"))
	page.Any("/jobs/*", s.pageJobs, pageHeaders(jobsCSP), s.signedIn, viewersOnlyRead)
}
