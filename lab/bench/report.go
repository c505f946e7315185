package bench

import (
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// PrintTable writes the report as a table: each measurement, its
// baseline, the ratio next to its target, and PASS or MISS; then the CPU
// each accepted charge cost, and any failure.
func PrintTable(w io.Writer, r Report) error {
	m := r.Machine
	api := "in this process"
	if m.API == "process" {
		api = "in its own process"
	}
	autovacuum := "on"
	if !m.Autovacuum {
		autovacuum = "off"
	}
	ledger := ""
	if m.ProviderLedger != "" {
		ledger = "; the fake provider's ledger in " + filepath.Dir(m.ProviderLedger)
	}
	fmt.Fprintf(w, "chargeflow bench: %d CPUs, %s, PostgreSQL %s (autovacuum %s); API %s (pool %d), worker concurrency %d%s; %ss per measurement\n\n",
		m.CPUs, m.GoVersion, m.Postgres, autovacuum, api, m.APIMaxConns, m.WorkerConcurrency, ledger, strconv.FormatFloat(r.Options.DurationSeconds, 'f', -1, 64))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEASUREMENT\tCLIENTS\tRESULT\tBASELINE\tRATIO\tTARGET\tVERDICT")
	var failures []string
	failed := func(what string, t Throughput) string {
		if t.Failures == 0 {
			return ""
		}
		failures = append(failures, fmt.Sprintf("%s: %d failed, first: %s", what, t.Failures, t.FirstFailure))
		return fmt.Sprintf(" (%d failed)", t.Failures)
	}
	for _, a := range r.Accept {
		fmt.Fprintf(tw, "accept\t%d\t%s/s API%s\t%s/s raw transaction%s\t%.2f×\t≥ %.2f×\t%s\n", a.Concurrency,
			count(a.API.PerSecond), failed(fmt.Sprintf("accept API at %d", a.Concurrency), a.API),
			count(a.Raw.PerSecond), failed(fmt.Sprintf("accept raw at %d", a.Concurrency), a.Raw),
			a.Ratio, AcceptTarget, verdict(a.Met))
		fmt.Fprintf(tw, "  vs minimal design\t%d\t%s/s API\t%s/s one River job, unique key%s\t%.2f×\t≥ %.2f×\t%s\n", a.Concurrency,
			count(a.API.PerSecond), count(a.Minimal.PerSecond), failed(fmt.Sprintf("accept minimal at %d", a.Concurrency), a.Minimal),
			a.MinimalRatio, MinimalTarget, verdict(a.MinimalMet))
	}
	s := r.Settle
	fmt.Fprintf(tw, "settle\t%d\t%s/s pending → succeeded (backlog %s, drained in %.1f s)\t%s/s accepted%s\t%.2f×\t≥ %.2f×\t%s\n",
		s.Concurrency, count(s.SettledPerSecond), count(float64(s.Backlog)), s.DrainSeconds,
		count(s.Accept.PerSecond), failed("settle fill", s.Accept), s.Ratio, SettleTarget,
		verdict(s.Ratio >= SettleTarget && s.NotSucceeded == 0 && s.Accept.Failures == 0))
	e := s.EndToEnd
	c := e.Confirmed
	drained := "never drained"
	if c.Drained {
		drained = fmt.Sprintf("drained %.1f s after", c.DrainedAfterSeconds)
	}
	fmt.Fprintf(tw, "  end to end\t%d\t%s/s carried for %s (%d probes): %s/s accepted%s, %s/s settled; backlog max %s, end %s, %s\t%s/s accept only\t%.2f×\t≥ %.2f×\t%s\n",
		s.Concurrency, count(e.CapacityPerSecond), time.Duration(r.Options.SustainDurationSeconds*float64(time.Second)), len(e.Probes),
		count(c.Accepted.PerSecond), failed("end to end", c.Accepted), count(c.SettledPerSecond),
		count(float64(c.BacklogMax)), count(float64(c.BacklogEnd)), drained,
		count(e.AcceptOnly), e.Ratio, EndToEndTarget, verdict(e.Met))
	fmt.Fprintf(tw, "  latency\t%d\taccepted → succeeded p50 %.0f ms, p99 %.0f ms (%s charges at %s/s, half the rate carried)\t\t\t\t\n",
		s.Concurrency, e.Latency.P50, e.Latency.P99, count(float64(e.Latency.Charges)), count(e.Latency.OfferedPerSecond))
	sl := s.Slow
	fmt.Fprintf(tw, "  slow provider\t%d\t%s/s pending → succeeded, provider answering in 150–400 ms (%d backlogs, %s charges, drained in %.1f s)\t%s/s with instant answers, drained beside them\t%.2f×\t≥ %.2f×\t%s\n",
		s.Concurrency, count(sl.SettledPerSecond), sl.Drains, count(float64(sl.Backlog)), sl.DrainSeconds,
		count(sl.InstantPerSecond), sl.Ratio, SlowProviderTarget, verdict(sl.Met))
	if s.NotSucceeded > 0 {
		failures = append(failures, fmt.Sprintf("settle: %d charges ended failed or in review", s.NotSucceeded))
	}
	if sl.NotSucceeded > 0 {
		failures = append(failures, fmt.Sprintf("settle, slow provider: %d charges ended failed or in review", sl.NotSucceeded))
	}
	for _, p := range r.Replay {
		if p.Replay.Failures > 0 {
			failures = append(failures, fmt.Sprintf("replay at %d: %d failed, first: %s", p.Concurrency, p.Replay.Failures, p.Replay.FirstFailure))
		}
		fmt.Fprintf(tw, "replay p99\t%d\tp50 %.2f ms, p99 %.2f ms replay, %s from memory (under %s/s accepts%s)\tp50 %.2f ms, p99 %.2f ms primary-key select\t%.2f×\t≤ %.2f×\t%s\n",
			p.Concurrency, p.Replay.P50, p.Replay.P99, share(p.FromMemory), count(p.Background.PerSecond), failed(fmt.Sprintf("replay background at %d", p.Concurrency), p.Background),
			p.Select.P50, p.Select.P99, p.Ratio, ReplayTarget, verdict(p.Met))
	}
	d := r.Storm
	fmt.Fprintf(tw, "duplicate storm\t%d\t%s; %d charge(s), %d provider call(s), %s\t\t\tno 5xx, 1 charge, 1 call\t%s\n",
		d.Requests, statuses(d.Statuses), d.Charges, d.ProviderCalls, d.FinalState, verdict(d.Met))
	if mem := r.Memory; mem != nil {
		fmt.Fprintf(tw, "memory (API RSS)\t\tpeak %s (VmHWM), highest sample %s\t\t\t< %s\t%s\n",
			mebibytes(mem.PeakRSS), mebibytes(mem.MaxRSS), mebibytes(MemoryTarget), verdict(mem.Met))
	} else {
		fmt.Fprintf(tw, "memory (API RSS)\t\tnot measured: the API runs in this process\t\t\t< %s\t\n", mebibytes(MemoryTarget))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	if len(r.Accept) > 0 && r.Accept[0].CPU != nil {
		generator := "the load generator"
		if m.API != "process" {
			generator = "the load generator and the API"
		}
		fmt.Fprintf(w, "\nCPU per accepted charge, µs (this process = %s; Postgres = the backends of the benchmark's database):\n", generator)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "clients\tAPI leg: this process\tAPI\tPostgres\ttotal\traw leg: this process\tPostgres\ttotal\tminimal design: this process\tPostgres\ttotal\t")
		for _, a := range r.Accept {
			c := a.CPU
			if c == nil {
				continue
			}
			fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t\n", a.Concurrency,
				c.APIClient, c.API, c.APIPostgres, c.APIClient+c.API+c.APIPostgres,
				c.RawClient, c.RawPostgres, c.RawClient+c.RawPostgres,
				c.MinimalClient, c.MinimalPostgres, c.MinimalClient+c.MinimalPostgres)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	accepted := "—"
	if len(r.Accept) > 0 && r.Accept[0].CPU != nil {
		a := r.Accept[0].CPU
		accepted = fmt.Sprintf("%.0f", a.API+a.APIPostgres)
	}
	fmt.Fprintf(w, "\nCPU per settled charge, µs, over the drain (worker = the worker process, or this one in process; — where it cannot be read), and charges per worker statement:\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "drain\tworker\tfake provider\tPostgres\ttotal\tper accepted charge (API + Postgres)\tclaim batch\tsettle batch\t")
	drainRow(tw, "settle", s.CPU, s.Batches, accepted)
	drainRow(tw, "instant, beside the slow", s.Slow.InstantCPU, s.Slow.InstantBatches, "")
	drainRow(tw, "slow provider", s.Slow.CPU, s.Slow.Batches, "")
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, v := range d.Violations {
		failures = append(failures, "duplicate storm: "+v)
	}
	if len(failures) > 0 {
		fmt.Fprintln(w, "\nfailures:")
		for _, f := range failures {
			fmt.Fprintln(w, "  "+f)
		}
	}
	return nil
}

// drainRow writes one drain's CPU per settled charge and batches.
func drainRow(w io.Writer, name string, c *SettleCPU, b Batches, accepted string) {
	cpu := "—\t—\t—\t—"
	if c != nil {
		cpu = fmt.Sprintf("%.0f\t%.0f\t%.0f\t%.0f", c.Worker, c.Provider, c.Postgres, c.Total())
	}
	fmt.Fprintf(w, "%s\t%s\t%s\t%.1f\t%.1f\t\n", name, cpu, accepted, b.Claim, b.Settle)
}

func verdict(met bool) string {
	if met {
		return "PASS"
	}
	return "MISS"
}

// count formats a number with thousands separators, without decimals.
func count(f float64) string {
	s := strconv.FormatInt(int64(f+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func mebibytes(b uint64) string {
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// statuses renders status counts as "201×199, 409×1".
func statuses(m map[string]int) string {
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s×%d", s, m[s]))
	}
	return strings.Join(parts, ", ")
}

// share formats a share as a percentage with one decimal, or "n/a" when
// negative (not measured).
func share(f float64) string {
	if f < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}
