package api

import (
	"context"
	_ "embed"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chargeflow/chargeflow/internal/buildinfo"
)

//go:embed openapi.yaml
var openAPIDocument []byte

// OpenAPI returns the OpenAPI document of the API.
func OpenAPI() []byte { return openAPIDocument }

func serveOpenAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/yaml", openAPIDocument)
}

// healthz says the process is alive, and which build it runs. It touches
// nothing else.
func (s *Server) healthz(c echo.Context) error {
	build := buildinfo.Read()
	return s.WriteJSON(c, http.StatusOK, map[string]string{"status": "ok", "version": build.Version, "commit": build.Commit})
}

// readyz says whether this process can serve: it is not shutting down, the
// database answers and its schema is current.
func (s *Server) readyz(c echo.Context) error {
	if s.draining.Load() {
		return NewProblem(CodeDraining, "this process is shutting down; it still answers the requests it gets until it stops")
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Ready(ctx); err != nil {
		p := NewProblem(CodeNotReady, "the database is unreachable or its schema is not current")
		p.RetryAfter = 1
		p.Cause = err
		return p
	}
	return s.WriteJSON(c, http.StatusOK, map[string]string{"status": "ready"})
}
