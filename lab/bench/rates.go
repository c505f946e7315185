package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/chargeflow/chargeflow/accept"
)

// RatesOptions configures Rates.
type RatesOptions struct {
	// Rates are the charges a second offered, one probe each, in order.
	Rates []float64
	// Duration is how long each rate is offered. Default 10 s.
	Duration time.Duration
	// Progress receives a line as each probe starts.
	Progress io.Writer
}

// RatesReport is what Rates measured.
type RatesReport struct {
	Machine Machine     `json:"machine"`
	Probes  []RateProbe `json:"probes"`
}

// RateProbe is the whole system at one offered rate: what it carried, and
// what each process spent per charge accepted and settled.
type RateProbe struct {
	Sustained
	// Charges is how many charges the probe accepted and settled.
	Charges int64 `json:"charges"`
	// CPU is per charge, accepted and settled; nil where a process could
	// not be read.
	CPU *RateCPU `json:"cpu_per_charge_us,omitempty"`
	// AcceptBatch is the charges an accept statement carried on average,
	// from the API's own histogram (accept.MetricAcceptBatch); 0 where the API
	// has no metrics endpoint to read.
	AcceptBatch float64 `json:"accept_batch,omitempty"`
}

// RateCPU is a probe's CPU per charge, in microseconds, per process.
type RateCPU struct {
	LoadGenerator float64 `json:"load_generator"`
	API           float64 `json:"api"`
	Worker        float64 `json:"worker"`
	Provider      float64 `json:"provider"`
	Postgres      float64 `json:"postgres"`
}

// Total is the sum over the processes.
func (c RateCPU) Total() float64 {
	return c.LoadGenerator + c.API + c.Worker + c.Provider + c.Postgres
}

// Rates offers each of o.Rates in turn to the whole system (API, worker,
// fake provider answering at once), as the end-to-end probes do, and
// reads what every process spent per charge at that rate. What a
// statement costs whatever it writes is shared by the charges that arrive
// while one runs, so a charge costs different amounts at different rates
// (CHANGELOG.md, "Where end to end's CPU goes"); the ratio lines
// measure at saturation, this at the rates a deployment runs at.
func Rates(ctx context.Context, sys *System, o RatesOptions) (RatesReport, error) {
	if len(o.Rates) == 0 {
		return RatesReport{}, fmt.Errorf("bench: no rates to probe")
	}
	for _, rate := range o.Rates {
		if !(rate > 0) || math.IsInf(rate, 0) {
			return RatesReport{}, fmt.Errorf("bench: rate %g is not positive", rate)
		}
	}
	r, err := newRunner(ctx, sys, Options{Duration: o.Duration, Progress: o.Progress})
	if err != nil {
		return RatesReport{}, err
	}
	defer r.admin.Close()
	var rep RatesReport
	if rep.Machine, err = r.machine(ctx); err != nil {
		return rep, err
	}
	stopWorker, err := sys.StartWorker(ctx)
	if err != nil {
		return rep, err
	}
	for i, rate := range o.Rates {
		fmt.Fprintf(r.opts.Progress, "rates: %.0f charges a second offered for %s\n", rate, r.opts.Duration)
		client := newAPIClient(sys, fmt.Sprintf("%srate%d-", r.keyPrefix, i), openLoopClients)
		p, err := r.probeRate(ctx, client, rate)
		client.http.CloseIdleConnections()
		if err != nil {
			_ = stopWorker()
			return rep, err
		}
		rep.Probes = append(rep.Probes, p)
	}
	return rep, stopWorker()
}

// probeRate offers perSecond for the run's duration from many paced
// clients, waits for the backlog to drain, and spreads the CPU every
// process used meanwhile over the charges settled.
func (r *runner) probeRate(ctx context.Context, client *apiClient, perSecond float64) (RateProbe, error) {
	var p RateProbe
	if err := r.waitDrained(ctx); err != nil {
		return p, err
	}
	before, err := r.counts(ctx)
	if err != nil {
		return p, err
	}
	cpuBefore, err := r.settleCPU(ctx)
	if err != nil {
		return p, err
	}
	batchesBefore, batchesOK := r.acceptBatches(ctx)
	if p.Sustained, err = r.sustain(ctx, client, openLoopClients, perSecond, r.opts.Duration); err != nil {
		return p, err
	}
	cpuAfter, err := r.settleCPU(ctx)
	if err != nil {
		return p, err
	}
	after, err := r.counts(ctx)
	if err != nil {
		return p, err
	}
	p.Charges = after.succeeded + after.notSucceeded - before.succeeded - before.notSucceeded
	if d := cpuAfter.sub(cpuBefore); d.known && p.Charges > 0 {
		p.CPU = &RateCPU{LoadGenerator: d.self.perOp(p.Charges), API: d.api.perOp(p.Charges),
			Worker: d.worker.perOp(p.Charges), Provider: d.provider.perOp(p.Charges), Postgres: d.postgres.perOp(p.Charges)}
		if r.sys.WorkerPID == 0 {
			// In process the worker is this process: the load generator
			// is counted there.
			p.CPU.LoadGenerator = 0
		}
	}
	if batchesAfter, ok := r.acceptBatches(ctx); ok && batchesOK && batchesAfter.count > batchesBefore.count {
		p.AcceptBatch = (batchesAfter.sum - batchesBefore.sum) / (batchesAfter.count - batchesBefore.count)
	}
	return p, nil
}

// histogram is a histogram's sum and count.
type histogram struct{ sum, count float64 }

// acceptBatches reads the API's accept batch histogram (accept.MetricAcceptBatch)
// from its /metrics, zero before its first batch; false where there is no
// endpoint to read (an API in this process).
func (r *runner) acceptBatches(ctx context.Context) (histogram, bool) {
	if r.sys.APIPID == 0 {
		return histogram{}, false
	}
	families, err := scrapeMetrics(ctx, r.sys.APIURL)
	if err != nil {
		return histogram{}, false
	}
	var h histogram
	for _, m := range families[prometheusName(accept.MetricAcceptBatch)].GetMetric() {
		h.sum += m.GetHistogram().GetSampleSum()
		h.count += float64(m.GetHistogram().GetSampleCount())
	}
	return h, true
}

// PrintRates writes a RatesReport as a table.
func PrintRates(w io.Writer, r RatesReport) error {
	m := r.Machine
	fmt.Fprintf(w, "chargeflow bench --rates: %d CPUs, %s, PostgreSQL %s; the fake provider answering at once; %d paced clients\n\n",
		m.CPUs, m.GoVersion, m.Postgres, openLoopClients)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "offered/s\taccepted/s\tsettled/s\tkept up\tbacklog max\taccept batch\tCPU per charge, µs: load generator\tAPI\tworker\tfake provider\tPostgres\ttotal\t")
	for _, p := range r.Probes {
		batch := "—"
		if p.AcceptBatch > 0 {
			batch = fmt.Sprintf("%.2f", p.AcceptBatch)
		}
		cpu := "—\t—\t—\t—\t—\t—"
		if c := p.CPU; c != nil {
			cpu = fmt.Sprintf("%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f", c.LoadGenerator, c.API, c.Worker, c.Provider, c.Postgres, c.Total())
		}
		fmt.Fprintf(tw, "%.0f\t%.0f\t%.0f\t%v\t%d\t%s\t%s\t\n", p.OfferedPerSecond, p.Accepted.PerSecond, p.SettledPerSecond,
			p.KeptUp, p.BacklogMax, batch, cpu)
	}
	return tw.Flush()
}
