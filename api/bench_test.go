//go:build unix

package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/apitest"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/internal/dbtest"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/submit"
	"github.com/chargeflow/chargeflow/tenant"
)

// telemetryModes are the configurations the benchmarks compare: none at
// all; what `chargeflow` runs without an OTLP endpoint (spans made but not
// exported, metrics kept for scrapes); and spans exported through the
// batch processor (to an exporter that drops them, so only our side is
// measured).
func telemetryModes() []struct {
	name   string
	config func(*api.Config)
} {
	withMetrics := func(c *api.Config) {
		c.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	}
	return []struct {
		name   string
		config func(*api.Config)
	}{
		{"off", func(*api.Config) {}},
		{"default", func(c *api.Config) {
			withMetrics(c)
			c.TracerProvider = sdktrace.NewTracerProvider()
		}},
		{"exported", func(c *api.Config) {
			withMetrics(c)
			c.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		}},
	}
}

// benchServer is an API on a fresh database with one tenant.
func benchServer(b *testing.B, config func(*api.Config)) (*api.Server, string) {
	b.Helper()
	pool := dbtest.NewPool(b, dbtest.URL(b), 20)
	_, key, err := tenant.Create(context.Background(), pool, "bench")
	if err != nil {
		b.Fatal(err)
	}
	cfg := app.ServerConfig{DB: pool, Jobs: apitest.NewQueue(b, pool, submit.Config{}),
		Provider: psp.NewClient(psp.Config{})} // no resolutions here
	cfg.Resolve.ResendWindow = time.Hour
	apitest.EditAPI(&cfg, config)
	server, err := app.NewServer(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return server, key
}

// BenchmarkAcceptTelemetry is POST /v1/charges end to end (loopback HTTP,
// strict parse, one transaction and commit) with each telemetry mode. Next
// to wall time per request it reports cpu-ns/op, this process's CPU time
// per request (client and server together), which a busy machine disturbs
// less:
//
//	go test -run '^$' -bench AcceptTelemetry -benchtime 3000x -count 5 ./api/
func BenchmarkAcceptTelemetry(b *testing.B) {
	for _, mode := range telemetryModes() {
		b.Run(mode.name, func(b *testing.B) {
			server, key := benchServer(b, mode.config)
			httpServer := httptest.NewServer(server.Handler())
			defer httpServer.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			var n atomic.Int64
			b.SetParallelism(4)
			b.ResetTimer()
			cpu0 := cpuTime()
			defer func() { b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op") }()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest(http.MethodPost, httpServer.URL+"/v1/charges", strings.NewReader(benchBody))
					req.Header.Set("Authorization", "Bearer "+key)
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Idempotency-Key", fmt.Sprintf("bench-key-%016d", n.Add(1)))
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					// Read to the end, so the connection is kept.
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != http.StatusCreated {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}

// BenchmarkRequestTelemetry is the CPU the API spends on a request that
// never reaches the database (an authenticated POST refused as invalid
// JSON, the key cached), in process: the per-request cost of the
// middleware, without the commit that dwarfs it on the accept path.
func BenchmarkRequestTelemetry(b *testing.B) {
	for _, mode := range telemetryModes() {
		b.Run(mode.name, func(b *testing.B) {
			server, key := benchServer(b, mode.config)
			handler := server.Handler()
			send := func() int {
				req := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{"amount": 1`))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", "bench-key-refused-0001")
				rec := httptest.NewRecorder()
				handler.ServeHTTP(rec, req)
				return rec.Code
			}
			if code := send(); code != http.StatusBadRequest { // warms the auth cache
				b.Fatalf("status %d", code)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			defer func() { b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op") }()
			for b.Loop() {
				send()
			}
		})
	}
}

const benchBody = `{"amount": 1000, "currency": "USD", "payment_method": "pm_card_visa", "description": "Order 1", "metadata": {"order": "A-1"}}`

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}
