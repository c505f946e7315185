package scenario

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// The invariants every run checks besides those of CheckLedger.
const (
	// InvariantAckedHasRow: every 201 the client saw has a charge row.
	InvariantAckedHasRow = "acked_has_row"
	// InvariantRowAcked: every row of charges, charge or refund, was
	// acknowledged to the client: a refusal stores nothing.
	InvariantRowAcked = "row_acked"
	// InvariantReplayIdentical: every replay equals the first 201, byte
	// for byte, and is marked Idempotent-Replayed.
	InvariantReplayIdentical = "replay_identical"
	// InvariantFencedWrites: no stale reconciler write was accepted — a
	// charge's reconciler events carry strictly increasing lease tokens.
	InvariantFencedWrites = "no_stale_fenced_write"
	// InvariantConverged: once faults stop, every charge settles, and no
	// stretch of the bound derived from the configuration passes without
	// one settling.
	InvariantConverged = "converged_in_bound"
	// InvariantLogsClean: no API key, idempotency key, card number,
	// payment method, description or metadata in any process's log.
	InvariantLogsClean = "logs_clean"
	// InvariantFaultsFired: the fault path the scenario exists for was
	// actually taken; a run where the crash never happened proves nothing.
	InvariantFaultsFired = "fault_path_fired"
	// InvariantClientAnswers: every valid request got a final answer the
	// scenario allows (no 5xx left standing, no unexpected 4xx).
	InvariantClientAnswers = "client_answers"
	// InvariantCompleted: the scenario's own steps ran to their end (its
	// clients got every answer they waited for, each step it needed was
	// taken). A run that fails here is still checked for every other
	// invariant.
	InvariantCompleted = "run_completed"
)

// Invariants lists every invariant in report order.
func Invariants() []string {
	return append(LedgerInvariants(), InvariantCompleted, InvariantAckedHasRow, InvariantRowAcked, InvariantReplayIdentical, InvariantFencedWrites,
		InvariantConverged, InvariantLogsClean, InvariantFaultsFired, InvariantClientAnswers, InvariantOutageServed, InvariantWebhooks, InvariantHistory)
}

// Report is the outcome of one scenario run.
type Report struct {
	Scenario string
	Seed     uint64
	Dir      string
	// Charges is how many charges the database holds; Acked how many
	// distinct 201s the client saw for charges.
	Charges int
	Acked   int
	// Refunds counts the refunds, Operations the captures and cancels.
	Refunds    RefundCounts
	Operations RefundCounts
	// Fired counts what happened: "crashpoint:<point>", "fault:<name>",
	// "kill:<role>", "postgres:restart", "fenced_refusals".
	Fired map[string]int
	// Measured holds what a scenario timed, e.g. the failover's "kill→first
	// 201": from the SIGKILL of the primary to the first charge accepted on
	// the new one. Shown after what fired.
	Measured map[string]time.Duration
	// Counts is the number of violations per invariant.
	Counts     map[string]int
	Violations []Violation
	// Found and Reattempted split how unknown outcomes were resolved: found
	// at the provider, or proven not found and re-attempted.
	Found       int
	Reattempted int
	NeedsReview int
	Converge    time.Duration
	Elapsed     time.Duration
	Passed      bool
	// History is what the check of the clients' history found.
	History HistoryResult
	// NotRun, when set, says why the scenario was not run at all (a
	// partition scenario without network namespaces): neither a pass nor
	// a failure, and shown as such.
	NotRun string
}

// RefundCounts is what became of the refunds a run sent, or of its
// captures and cancels.
type RefundCounts struct {
	// Acked is how many distinct 201s the client saw, Refused how many
	// requests were refused (charge_not_refundable, refund_exceeds_charge;
	// charge_not_capturable, operation_in_progress,
	// capture_exceeds_authorization), and Succeeded how many rows the
	// database holds as succeeded.
	Acked, Refused, Succeeded int
}

func (r Report) firedAll(names []string) bool {
	for _, name := range names {
		if r.Fired[name] == 0 {
			return false
		}
	}
	return true
}

// check runs every invariant and fills the report.
func (s *system) check(ctx context.Context, rep *Report, converged bool, bound time.Duration) error {
	if err := s.harvestFaults(ctx); err != nil {
		return err
	}
	add := func(vs ...Violation) { rep.Violations = append(rep.Violations, vs...) }

	charges, err := ReadCharges(ctx, s.pool)
	if err != nil {
		return err
	}
	ledgers, err := s.ledgers(ctx)
	if err != nil {
		return err
	}
	add(CheckLedgers(charges, ledgers)...)

	// Every 201 the client saw has a row, and every row had a 201.
	stored := make(map[string]bool, len(charges))
	for _, c := range charges {
		stored[c.ID] = true
		switch {
		case c.ParentID == "":
			rep.Charges++
		case c.State != "succeeded":
		case c.Kind == kindCapture || c.Kind == kindCancel:
			rep.Operations.Succeeded++
		default:
			rep.Refunds.Succeeded++
		}
		if c.State == "needs_review" {
			rep.NeedsReview++
		}
	}
	acked := make(map[string]bool, len(charges))
	s.client.mu.Lock()
	rep.Acked = s.client.chargeAcks
	rep.Refunds.Acked = s.client.refundAcks
	rep.Operations.Acked = s.client.opAcks
	for key, a := range s.client.acks {
		acked[a.id] = true
		if !stored[a.id] {
			add(Violation{InvariantAckedHasRow, a.id, "a 201 for key " + redactKey(key) + " has no row"})
		}
	}
	for code, n := range s.client.refusals {
		rep.Refunds.Refused += n
		rep.Fired["refusals:"+code] = n
	}
	for code, n := range s.client.opRefusals {
		rep.Operations.Refused += n
		rep.Fired["refusals:"+code] = n
	}
	for _, key := range s.client.mismatches {
		add(Violation{InvariantReplayIdentical, redactKey(key), "a replay differed from the first 201"})
	}
	for _, u := range s.client.unexpected {
		add(Violation{InvariantClientAnswers, "", u})
	}
	if s.sc.AllowedStatus != nil {
		for status, n := range s.client.statuses {
			if !s.sc.AllowedStatus(status) {
				add(Violation{InvariantClientAnswers, fmt.Sprint(status), fmt.Sprintf("%d answers with status %d", n, status)})
			}
		}
	}
	s.client.mu.Unlock()
	s.client.mu.Lock()
	unanswered := s.client.gaveUp
	s.client.mu.Unlock()
	notAcked := "a row the client never got a 201 for: a refused request stored it"
	if unanswered > 0 {
		notAcked += fmt.Sprintf(", or it is one of the %d requests the client gave up on", unanswered)
	}
	for _, c := range charges {
		if !acked[c.ID] {
			add(Violation{InvariantRowAcked, c.ID, notAcked})
		}
	}

	// Reconciler events carry strictly increasing lease tokens per charge.
	// The hold sweep's release of a held charge is the one that carries
	// none (reconciler/hold.go): it claims without a lease, and its move is
	// a compare-and-set from requires_capture with no capture or cancel in
	// flight, from which nothing but a release of a hold the provider
	// released can follow.
	rows, err := s.pool.Query(ctx, `SELECT charge_id, lease_token FROM charge_audit
		WHERE actor LIKE 'reconciler:%' AND reason IS DISTINCT FROM 'hold_released' ORDER BY charge_id, id`)
	if err != nil {
		return err
	}
	var prevCharge string
	var prevToken int64
	for rows.Next() {
		var charge string
		var token *int64
		if err := rows.Scan(&charge, &token); err != nil {
			rows.Close()
			return err
		}
		switch {
		case token == nil:
			add(Violation{InvariantFencedWrites, charge, "a reconciler event without a lease token"})
		case charge == prevCharge && *token <= prevToken:
			add(Violation{InvariantFencedWrites, charge, fmt.Sprintf("lease token %d after %d", *token, prevToken)})
		default:
			prevToken = *token
		}
		prevCharge = charge
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}

	if !converged {
		n, _ := s.nonTerminal(ctx)
		add(Violation{InvariantConverged, "", fmt.Sprintf("%d charges still unsettled after faults stopped, and none settled for %s", n, bound)})
	}

	// The log audit.
	for _, v := range s.auditLogs() {
		add(v)
	}

	if err := s.checkWebhooks(ctx, rep, bound); err != nil {
		return err
	}

	// What every client saw, against the idempotency contract.
	add(s.checkHistory(rep)...)

	// What fired.
	s.mu.Lock()
	for k, v := range s.fired {
		rep.Fired[k] += v
	}
	for role, n := range s.kills {
		rep.Fired["kill:"+role] += n
	}
	rep.Measured = maps.Clone(s.measured)
	s.mu.Unlock()
	for _, point := range crashPointNames(s.sc.MustFire) {
		n, err := countInLogs(s.dir, `"msg":"crashpoint fired"`, `"point":"`+point+`"`)
		if err != nil {
			return err
		}
		rep.Fired["crashpoint:"+point] = n
	}
	if err := s.refundsFired(ctx, rep.Fired); err != nil {
		return err
	}
	if err := s.operationsFired(ctx, rep.Fired); err != nil {
		return err
	}
	if s.sc.Routed {
		if err := s.routeFired(ctx, rep.Fired); err != nil {
			return err
		}
		outage, err := s.checkOutage(ctx, rep)
		if err != nil {
			return err
		}
		add(outage...)
	}
	fenced, err := countInLogs(s.dir, `"msg":"fenced write refused`)
	if err != nil {
		return err
	}
	if fenced > 0 {
		rep.Fired["fenced_refusals"] = fenced
	}
	for _, name := range s.sc.MustFire {
		if rep.Fired[name] == 0 {
			add(Violation{InvariantFaultsFired, name, "never happened, so this run proves nothing about it"})
		}
	}

	var reasons = map[string]*int{"lookup_found_succeeded": &rep.Found, "lookup_found_declined": &rep.Found, "proven_not_found": &rep.Reattempted}
	for reason, into := range reasons {
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM charge_audit WHERE reason = $1`, reason).Scan(&n); err != nil {
			return err
		}
		*into += n
	}
	for _, v := range rep.Violations {
		rep.Counts[v.Invariant]++
	}
	return nil
}

// refundsFired tells what happened to refunds apart from what happened to
// charges. The provider counts faults by name alone, so its log says which
// fired on a refund: "fault:X" counts X on charges and lookups,
// "fault:refund:X" on refunds. "refunds:found" and "refunds:re-attempted"
// count refunds whose outcome was unknown, found by a lookup or proven not
// found and sent again: the proof that a crash or a fault cut a refund and
// the refund path recovered.
func (s *system) refundsFired(ctx context.Context, fired map[string]int) error {
	err := eachLine(s.psp.log, func(line string) {
		if !strings.Contains(line, `"msg":"fakepsp: fault fired"`) || !strings.Contains(line, `"on":"refund"`) {
			return
		}
		var entry struct {
			Fault string `json:"fault"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Fault != "" {
			fired["fault:"+entry.Fault]--
			fired["fault:refund:"+entry.Fault]++
		}
	})
	if err != nil {
		return err
	}
	var found, reattempted int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE e.reason LIKE 'lookup_found_%'),
		count(*) FILTER (WHERE e.reason = 'proven_not_found')
		FROM charge_audit e JOIN charges c ON c.id = e.charge_id WHERE c.kind = 'refund'`).Scan(&found, &reattempted); err != nil {
		return err
	}
	fired["refunds:found"], fired["refunds:re-attempted"] = found, reattempted
	return nil
}

func crashPointNames(mustFire []string) []string {
	var out []string
	for _, name := range mustFire {
		if point, ok := strings.CutPrefix(name, "crashpoint:"); ok {
			out = append(out, point)
		}
	}
	return out
}

// redactKey shows an idempotency key's shape without the key.
func redactKey(key string) string {
	if len(key) <= 8 {
		return "…"
	}
	return "…" + key[len(key)-6:]
}

// auditLogs searches every process log for the canaries of the run.
func (s *system) auditLogs() []Violation {
	canaries := map[string]string{
		"api key":              s.apiKey,
		"idempotency key":      keyPrefix(s.seed),
		"description":          canaryDescription(s.seed),
		"metadata value":       canaryMetadata(s.seed),
		"metadata key":         canaryMetadataKey,
		"card number":          canaryCard,
		"card number, grouped": canaryCardGrouped,
		"payment method":       "pm_card_",
	}
	if s.sc.Routed {
		canaries["provider api key"] = providerKey
	}
	files, _ := filepath.Glob(filepath.Join(s.dir, "*.log"))
	var out []Violation
	for _, path := range files {
		for what, canary := range canaries {
			n := 0
			_ = eachLine(path, func(line string) {
				if strings.Contains(line, canary) {
					n++
				}
			})
			if n > 0 {
				out = append(out, Violation{InvariantLogsClean, filepath.Base(path), fmt.Sprintf("%d lines contain the %s", n, what)})
			}
		}
	}
	slices.SortFunc(out, func(a, b Violation) int { return strings.Compare(a.Subject+a.Detail, b.Subject+b.Detail) })
	return out
}

// PrintTable writes the reports as a table, one row per scenario.
func PrintTable(w io.Writer, reports []Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := []string{"scenario", "charges", "acked", "refunds acked/refused/succeeded", "captures+cancels acked/refused/succeeded"}
	for _, inv := range Invariants() {
		header = append(header, short(inv))
	}
	header = append(header, "found/re-attempted/review", "converge", "result", "faults fired")
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range reports {
		row := []string{r.Scenario, fmt.Sprint(r.Charges), fmt.Sprint(r.Acked),
			fmt.Sprintf("%d/%d/%d", r.Refunds.Acked, r.Refunds.Refused, r.Refunds.Succeeded),
			fmt.Sprintf("%d/%d/%d", r.Operations.Acked, r.Operations.Refused, r.Operations.Succeeded)}
		for _, inv := range Invariants() {
			cell := fmt.Sprint(r.Counts[inv])
			if inv == InvariantHistory && r.History.Result == historyUnknown {
				cell = "?"
			}
			row = append(row, cell)
		}
		result := "ok"
		switch {
		case r.NotRun != "":
			result = "not run: " + r.NotRun
		case !r.Passed:
			result = "FAIL"
		case len(r.Violations) > 0:
			result = "caught (negative control)"
		}
		row = append(row, fmt.Sprintf("%d/%d/%d", r.Found, r.Reattempted, r.NeedsReview), r.Converge.Round(100*time.Millisecond).String(), result, firedSummary(r.Fired)+measuredSummary(r.Measured))
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
}

// short is an invariant's column header.
func short(invariant string) string {
	return map[string]string{
		InvariantAtMostOnce:            "at-most-once",
		InvariantOnceAcrossProviders:   "one-provider",
		InvariantOutageServed:          "outage",
		InvariantSucceededCharged:      "succ⇔charged",
		InvariantFailedUncharged:       "failed⇒none",
		InvariantNoOrphans:             "orphans",
		InvariantNotOverRefunded:       "≤charged",
		InvariantCapturedOnce:          "captured-once",
		InvariantCaptureWithinAuth:     "≤authorized",
		InvariantNoCaptureAfterRelease: "no-late-capture",
		InvariantHoldMatches:           "hold⇔provider",
		InvariantTerminal:              "settled",
		InvariantAckedHasRow:           "201⇒row",
		InvariantRowAcked:              "row⇒201",
		InvariantReplayIdentical:       "replays",
		InvariantFencedWrites:          "fenced",
		InvariantConverged:             "in-bound",
		InvariantCompleted:             "completed",
		InvariantLogsClean:             "logs",
		InvariantFaultsFired:           "fired",
		InvariantClientAnswers:         "answers",
		InvariantWebhooks:              "webhooks",
		InvariantHistory:               "history",
	}[invariant]
}

func firedSummary(fired map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(fired)) {
		if fired[k] > 0 {
			name := k
			for _, prefix := range []string{"crashpoint:", "fault:"} {
				name = strings.TrimPrefix(name, prefix)
			}
			parts = append(parts, fmt.Sprintf("%s=%d", name, fired[k]))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// measuredSummary lists what a run timed, after what fired.
func measuredSummary(measured map[string]time.Duration) string {
	var out string
	for _, k := range slices.Sorted(maps.Keys(measured)) {
		out += fmt.Sprintf(" %s=%s", k, measured[k].Round(10*time.Millisecond))
	}
	return out
}

// PrintViolations lists every violation of every failed report.
func PrintViolations(w io.Writer, reports []Report) {
	for _, r := range reports {
		if r.Passed || r.NotRun != "" {
			continue
		}
		fmt.Fprintf(w, "\n%s (seed %d, logs in %s):\n", r.Scenario, r.Seed, r.Dir)
		for i, v := range r.Violations {
			if i == 20 {
				fmt.Fprintf(w, "  … and %d more\n", len(r.Violations)-20)
				break
			}
			fmt.Fprintf(w, "  %s\n", v)
		}
		if len(r.Violations) == 0 {
			fmt.Fprintln(w, "  the negative control found no violation: the checker missed a double charge")
		}
		sc, _ := Find(r.Scenario)
		for _, inv := range uncaught(sc.MustCatch, r) {
			fmt.Fprintf(w, "  the negative control's fault was not caught by %s, as it must be\n", inv)
		}
		if r.History.Text != "" {
			fmt.Fprintf(w, "  the first history that is not linearizable (%s):\n", cmp.Or(r.History.Visualization, "no visualization"))
			for line := range strings.Lines(r.History.Text) {
				fmt.Fprintf(w, "    %s", line)
			}
		}
	}
}
