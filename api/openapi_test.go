package api_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/event"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/submit"
)

// The OpenAPI document describes exactly the routes that are served to
// programs, and every problem code the API can send. The operator's page
// (/ops/ but not /ops/v1/) is HTML for people, and is not in it. Its event
// types are the ones the API accepts and Postgres writes.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()

	var doc struct {
		Paths      map[string]map[string]any `yaml:"paths"`
		Components struct {
			Schemas struct {
				Problem struct {
					Properties struct {
						Code struct {
							Enum []string `yaml:"enum"`
						} `yaml:"code"`
					} `yaml:"properties"`
				} `yaml:"Problem"`
				EventType struct {
					Enum []string `yaml:"enum"`
				} `yaml:"EventType"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(api.OpenAPI(), &doc))

	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	// The pool connects lazily: building the routes needs no database.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	defer pool.Close()
	cfg := app.ServerConfig{DB: pool, Jobs: apitest.NewQueue(t, pool, submit.Config{}), Provider: psp.NewClient(psp.Config{})}
	cfg.Resolve.ResendWindow = time.Hour
	server, err := app.NewServer(cfg)
	require.NoError(t, err)
	param := regexp.MustCompile(`:([a-z_]+)`)
	var served, pages []string
	for _, route := range server.Routes() {
		_, path, _ := strings.Cut(route, " ")
		if strings.HasPrefix(path, "/ops") && !strings.HasPrefix(path, "/ops/v1/") {
			pages = append(pages, route)
			continue
		}
		served = append(served, param.ReplaceAllString(route, "{$1}"))
	}
	require.Contains(t, pages, "GET /ops/", "the page is served, and left out here on purpose")
	slices.Sort(documented)
	slices.Sort(served)
	require.Equal(t, served, documented)

	var codes []string
	for _, c := range api.Codes() {
		codes = append(codes, string(c))
	}
	slices.Sort(codes)
	require.Equal(t, codes, doc.Components.Schemas.Problem.Properties.Code.Enum)
	require.Equal(t, event.Types, doc.Components.Schemas.EventType.Enum, "the event types are the ones the API accepts and writes")
}
