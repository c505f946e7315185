package bench

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/chargeflow/chargeflow/api"
)

// replaySources is the API's replays counter (api.MetricReplays) by
// source: answered from the process's replay cache, or from a read of
// the record.
type replaySources struct {
	memory, database int64
}

// memoryShare is the share of the replays between from and s that the
// API answered from memory; -1 when there were none.
func (s replaySources) memoryShare(from replaySources) float64 {
	memory, database := s.memory-from.memory, s.database-from.database
	if memory+database <= 0 {
		return -1
	}
	return float64(memory) / float64(memory+database)
}

// add counts n replays of source.
func (s *replaySources) add(source string, n int64) error {
	switch source {
	case api.ReplaySourceMemory:
		s.memory += n
	case api.ReplaySourceDatabase:
		s.database += n
	default:
		return fmt.Errorf("%s: unknown source %q", api.MetricReplays, source)
	}
	return nil
}

// scrapeReplays reads the counter from the API's GET /metrics.
func scrapeReplays(ctx context.Context, apiURL string) (replaySources, error) {
	families, err := scrapeMetrics(ctx, apiURL)
	if err != nil {
		return replaySources{}, err
	}
	name := prometheusName(api.MetricReplays) + "_total"
	family, ok := families[name]
	if !ok {
		return replaySources{}, fmt.Errorf("GET /metrics: no %s", name)
	}
	var s replaySources
	for _, m := range family.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "source" {
				if err := s.add(l.GetValue(), int64(m.GetCounter().GetValue())); err != nil {
					return replaySources{}, err
				}
			}
		}
	}
	return s, nil
}

// scrapeMetrics reads every metric family from the API's GET /metrics.
func scrapeMetrics(ctx context.Context, apiURL string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, apiURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET /metrics: %w", err)
	}
	return families, nil
}

// prometheusName is an OpenTelemetry metric's name as the API's
// Prometheus exporter writes it (a counter's also ends in _total).
func prometheusName(otel string) string { return strings.ReplaceAll(otel, ".", "_") }

// collectReplays reads the counter from an in-process API's metric reader.
func collectReplays(ctx context.Context, reader *sdkmetric.ManualReader) (replaySources, error) {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return replaySources{}, err
	}
	var s replaySources
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != api.MetricReplays || !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				source, _ := p.Attributes.Value("source")
				if err := s.add(source.AsString(), p.Value); err != nil {
					return replaySources{}, err
				}
			}
		}
	}
	return s, nil
}
