package api

import (
	"github.com/labstack/echo/v4"
)

// routes is the whole merchant API; the operator plane (package opsplane)
// is mounted beside it (Server.Mount).
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
	e.POST("/v1/provider_webhooks/:psp", s.receiveNotification)

	v1 := e.Group("/v1", s.LimitAuthFailures, s.authenticate)
	v1.POST("/charges", s.createCharge)
	v1.GET("/charges", s.listCharges)
	v1.GET("/charges/:id", s.getCharge)
	// A charge's audit trail, under the route name merchants already use.
	v1.GET("/charges/:id/events", s.listAuditTrail)
	v1.GET("/charges/:id/refunds", s.listRefunds)
	v1.POST("/charges/:id/capture", s.captureCharge)
	v1.POST("/charges/:id/cancel", s.cancelCharge)
	v1.POST("/refunds", s.createRefund)
	v1.GET("/refunds/:id", s.getRefund)
	v1.GET("/captures/:id", s.getCapture)
	v1.GET("/cancels/:id", s.getCancel)
	v1.GET("/events", s.listEvents)
	v1.GET("/events/:id", s.getEvent)
	v1.GET("/events/:id/deliveries", s.listDeliveries)
	v1.POST("/webhook_endpoints", s.createEndpoint)
	v1.GET("/webhook_endpoints", s.listEndpoints)
	v1.DELETE("/webhook_endpoints/:id", s.deleteEndpoint)
}
