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

	v1 := e.Group("/v1", s.limitAuthFailures, s.authenticate)
	v1.POST("/charges", s.createCharge)
	v1.GET("/charges", s.listCharges)
	v1.GET("/charges/:id", s.getCharge)
	v1.GET("/charges/:id/events", s.listEvents)

	// The operator plane: operator tokens only; every action is audited in
	// the charge's events (ops.go).
	ops := e.Group("/ops/v1", s.limitAuthFailures, s.authenticateOperator)
	ops.GET("/charges", s.opsListCharges)
	ops.GET("/charges/:id", s.opsGetCharge)
	ops.POST("/charges/:id/reconcile", s.opsReconcile, requireAdmin)
	ops.POST("/charges/:id/resolve", s.opsResolve, requireAdmin)
}
