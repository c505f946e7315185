package scenario

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// InvariantHistory: the history every client observed is linearizable
// against the idempotency contract (historyModel).
const InvariantHistory = "history_linearizable"

// The outcomes of a history check.
const (
	historyOK      = "ok"
	historyIllegal = "illegal"
	// historyUnknown: the checker ran out of time, which is neither a pass
	// nor a violation found.
	historyUnknown = "unknown"
)

// HistoryResult is what the history check found.
type HistoryResult struct {
	// Result is "ok", "illegal" or "unknown" (the check timed out).
	Result                        string
	Operations, Partitions, Found int
	// Took is how long the check ran.
	Took time.Duration
	// Text shows the first partition that is not linearizable, one
	// operation a line, keys redacted.
	Text string
	// Visualization is the path of porcupine's page of the partitions that
	// are not linearizable, in the run's folder.
	Visualization string
}

// The codes of a 400 given before the key is looked up (docs/api.md,
// "Accepting a charge"): a request that reuses a key gets these as a
// fresh one would; any other refusal of its body is 422.
var preLookupCodes = map[string]bool{"idempotency_key_missing": true, "idempotency_key_invalid": true, "card_number_detected": true,
	"invalid_json": true, "duplicate_member": true, "invalid_utf8": true, "incomplete_body": true}

// noEffect are the statuses of rejections that store nothing and come
// before the key matters (docs/api.md, "Protocol").
var noEffect = map[int]bool{http.StatusUnauthorized: true, http.StatusMethodNotAllowed: true, http.StatusRequestEntityTooLarge: true,
	http.StatusUnsupportedMediaType: true, http.StatusTooManyRequests: true, http.StatusRequestHeaderFieldsTooLarge: true}

// keyRec is what the API stored under a key, as far as the client knows:
// the fingerprint of the request, the id of what it created and the hash
// of its 201 ("" until an answer showed them: an attempt whose answer was
// lost may have created it), and for a refund the amount it reserved.
type keyRec struct {
	fp, id, body string
	amount       int64
}

func (r keyRec) stored() bool { return r.fp != "" }

type refundRec struct {
	key string
	rec keyRec
}

// hstate is one partition's state in the model: a charge's key, the
// charge it created, what the client last read of it, and its refunds',
// captures' and cancels' keys. States are values: step returns new ones.
type hstate struct {
	charge keyRec
	// amount is the charge's, reserved what its refunds reserved.
	amount, reserved int64
	// read is the status the client last read ("" before any); succeeded,
	// failed and canceled are terminal, and a refund accepted means
	// succeeded.
	read    string
	refunds []refundRec // by key
	ops     []refundRec // the captures' and cancels', by key
	enc     string
}

func (s *hstate) seal() *hstate {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%s|%d|%d|%d|%s", s.charge.fp, s.charge.id, s.charge.body, s.charge.amount, s.amount, s.reserved, s.read)
	for _, list := range [][]refundRec{s.refunds, s.ops} {
		b.WriteString("|")
		for _, r := range list {
			fmt.Fprintf(&b, "|%s:%s:%s:%s:%d", r.key, r.rec.fp, r.rec.id, r.rec.body, r.rec.amount)
		}
	}
	s.enc = b.String()
	return s
}

func (s *hstate) clone() *hstate {
	n := *s
	n.refunds = slices.Clone(s.refunds)
	n.ops = slices.Clone(s.ops)
	return &n
}

func (s *hstate) refund(key string) keyRec { return recordOf(s.refunds, key) }

func (s *hstate) setRefund(key string, rec keyRec) { s.refunds = withRecord(s.refunds, key, rec) }

// recordOf is the record of key in list, sorted by key.
func recordOf(list []refundRec, key string) keyRec {
	if i, ok := slices.BinarySearchFunc(list, key, func(r refundRec, k string) int { return strings.Compare(r.key, k) }); ok {
		return list[i].rec
	}
	return keyRec{}
}

// withRecord sets key's record in list, sorted by key, and returns it.
func withRecord(list []refundRec, key string, rec keyRec) []refundRec {
	i, ok := slices.BinarySearchFunc(list, key, func(r refundRec, k string) int { return strings.Compare(r.key, k) })
	if ok {
		list[i].rec = rec
		return list
	}
	return slices.Insert(list, i, refundRec{key, rec})
}

// fits says whether a refund of want (0: all that is left) fits in what is
// left of the charge, and how much it would take.
func (s *hstate) fits(want int64) (int64, bool) {
	left := s.amount - s.reserved
	if want == 0 {
		return left, left > 0
	}
	return want, want <= left
}

func terminal(state string) bool {
	return state == "succeeded" || state == "failed" || state == statusReleased
}

var chargeStates = map[string]bool{"pending": true, "submitting": true, "unknown": true, "succeeded": true, "failed": true, "needs_review": true,
	statusHeld: true, statusReleased: true}

// replayOf is the step of a 201 to a key that has a record: the replay,
// marked, of the same request, with the first answer's id and body. It
// returns the record with what the answer showed, or false.
func replayOf(rec keyRec, in opInput, out opOutput) (keyRec, bool) {
	if rec.fp != in.fp || !out.replayed || rec.id != "" && (rec.id != out.id || rec.body != out.body) {
		return rec, false
	}
	rec.id, rec.body = out.id, out.body
	return rec, true
}

// refusalOK judges the answers every idempotent POST shares: a 422 only
// for another request under a key with a record; 409 request_in_progress
// only while no record is committed and another attempt that may hold the
// key overlaps; a 400 never for the request the record holds; and the
// rejections that store nothing. handled is false for any other answer.
func refusalOK(rec keyRec, in opInput, out opOutput) (ok, handled bool) {
	switch {
	case out.status == http.StatusUnprocessableEntity:
		return rec.stored() && rec.fp != in.fp && out.code == "idempotency_key_reused", true
	case out.status == http.StatusConflict && out.code == codeRequestInProgress:
		return !rec.stored() && in.inFlight, true
	case out.status == http.StatusBadRequest:
		return !rec.stored() || rec.fp != in.fp && preLookupCodes[out.code], true
	case noEffect[out.status]:
		return true, true
	}
	return false, false
}

// step is the model of the idempotency contract (docs/api.md, "Accepting
// a charge", "Refunds"): every state s may move to on the operation, none
// if it cannot have happened from s.
func step(s *hstate, in opInput, out opOutput) []*hstate {
	switch in.kind {
	case opCharge:
		return stepCharge(s, in, out)
	case opRefund:
		return stepRefund(s, in, out)
	case opCapture, opCancel:
		return stepOperation(s, in, out)
	default:
		return stepRead(s, out)
	}
}

func stepCharge(s *hstate, in opInput, out opOutput) []*hstate {
	rec := s.charge
	if out.unknown {
		if rec.stored() {
			return []*hstate{s}
		}
		n := s.clone()
		n.charge, n.amount = keyRec{fp: in.fp}, in.amount
		return []*hstate{s, n.seal()}
	}
	if out.status == http.StatusCreated {
		n := s.clone()
		if !rec.stored() {
			// The first answer: it created the charge, and says so.
			if out.replayed {
				return nil
			}
			n.charge, n.amount = keyRec{fp: in.fp, id: out.id, body: out.body}, in.amount
			return []*hstate{n.seal()}
		}
		var ok bool
		if n.charge, ok = replayOf(rec, in, out); !ok {
			return nil
		}
		return []*hstate{n.seal()}
	}
	if ok, handled := refusalOK(rec, in, out); handled && ok {
		return []*hstate{s}
	}
	return nil
}

func stepRefund(s *hstate, in opInput, out opOutput) []*hstate {
	rec := s.refund(in.key)
	// create is s with this refund created, if it could be.
	create := func(id, body string) *hstate {
		amount, fits := s.fits(in.amount)
		if !fits || !s.charge.stored() || s.read == "failed" {
			return nil
		}
		n := s.clone()
		n.setRefund(in.key, keyRec{fp: in.fp, id: id, body: body, amount: amount})
		n.reserved += amount
		n.read = "succeeded"
		return n.seal()
	}
	if next, handled := stepCreated(s, rec, in, out, create, func(n *hstate) keyRec { return n.refund(in.key) },
		func(n *hstate, rec keyRec) { n.setRefund(in.key, rec) }); handled {
		return next
	}
	switch {
	case out.status == http.StatusConflict && out.code == codeRefundExceedsCharge:
		// Only a succeeded charge is measured, and a key with a record
		// gets its answer first.
		if _, fits := s.fits(in.amount); fits || rec.stored() || !s.charge.stored() || s.read == "failed" {
			return nil
		}
		n := s.clone()
		n.read = "succeeded"
		return []*hstate{n.seal()}
	case out.status == http.StatusConflict && out.code == codeChargeNotRefundable:
		if rec.stored() || s.read == "succeeded" {
			return nil
		}
		return []*hstate{s}
	case out.status == http.StatusNotFound:
		if s.charge.stored() {
			return nil // the charge it names was created
		}
		return []*hstate{s}
	}
	if ok, handled := refusalOK(rec, in, out); handled && ok {
		return []*hstate{s}
	}
	return nil
}

// stepCreated is what a refund, a capture and a cancel share, each a
// record of its own under its key (rec, in s): an attempt without an
// answer may have created it (create, nil when it could not) or not; a
// first 201 creates it, not marked as a replay, of the amount the record
// created holds (recorded reads it back); a later one replays it, with the
// first answer's id, body and amount, whose record set keeps. handled is
// false for any other answer.
func stepCreated(s *hstate, rec keyRec, in opInput, out opOutput, create func(id, body string) *hstate,
	recorded func(*hstate) keyRec, set func(*hstate, keyRec)) (next []*hstate, handled bool) {
	switch {
	case out.unknown:
		if n := create("", ""); !rec.stored() && n != nil {
			return []*hstate{s, n}, true
		}
		return []*hstate{s}, true
	case out.status == http.StatusCreated && !rec.stored():
		n := create(out.id, out.body)
		if out.replayed || n == nil || recorded(n).amount != out.amount {
			return nil, true
		}
		return []*hstate{n}, true
	case out.status == http.StatusCreated:
		got, ok := replayOf(rec, in, out)
		if !ok || out.amount != rec.amount {
			return nil, true
		}
		n := s.clone()
		set(n, got)
		return []*hstate{n.seal()}, true
	}
	return nil, false
}

// stepOperation is a capture or a cancel (docs/api.md, "Authorize now,
// capture later"). A 201 creates its record, of what it takes (all that was
// authorized when it names no amount; a cancel, the authorized amount),
// only for a charge created and never read captured, released or failed;
// a refusal stores nothing: charge_not_capturable for a charge created,
// operation_in_progress only while another capture or cancel of it may
// exist, capture_exceeds_authorization only for more than the charge.
func stepOperation(s *hstate, in opInput, out opOutput) []*hstate {
	rec := recordOf(s.ops, in.key)
	amount := cmp.Or(in.amount, s.amount)
	create := func(id, body string) *hstate {
		if !s.charge.stored() || terminal(s.read) || amount > s.amount {
			return nil
		}
		n := s.clone()
		n.ops = withRecord(n.ops, in.key, keyRec{fp: in.fp, id: id, body: body, amount: amount})
		return n.seal()
	}
	if next, handled := stepCreated(s, rec, in, out, create, func(n *hstate) keyRec { return recordOf(n.ops, in.key) },
		func(n *hstate, rec keyRec) { n.ops = withRecord(n.ops, in.key, rec) }); handled {
		return next
	}
	switch {
	case out.status == http.StatusConflict && out.code == codeChargeNotCapturable:
		if rec.stored() || !s.charge.stored() {
			return nil
		}
		return []*hstate{s}
	case out.status == http.StatusConflict && out.code == codeOperationInProgress:
		other := slices.ContainsFunc(s.ops, func(r refundRec) bool { return r.key != in.key && r.rec.stored() })
		if rec.stored() || !s.charge.stored() || !other || terminal(s.read) {
			return nil
		}
		return []*hstate{s}
	case out.status == http.StatusUnprocessableEntity && out.code == codeCaptureExceedsAuthorization:
		if rec.stored() || !s.charge.stored() || in.kind != opCapture || in.amount <= s.amount {
			return nil
		}
		return []*hstate{s}
	case out.status == http.StatusNotFound:
		if s.charge.stored() {
			return nil
		}
		return []*hstate{s}
	}
	if ok, handled := refusalOK(rec, in, out); handled && ok {
		return []*hstate{s}
	}
	return nil
}

// stepRead: a read finds the charge once it was created, in a status no
// terminal one it was read in before forbids.
func stepRead(s *hstate, out opOutput) []*hstate {
	switch {
	case out.status == http.StatusOK:
		if !s.charge.stored() || !chargeStates[out.state] || terminal(s.read) && out.state != s.read {
			return nil
		}
		n := s.clone()
		n.read = out.state
		return []*hstate{n.seal()}
	case out.status == http.StatusNotFound && !s.charge.stored(), noEffect[out.status]:
		return []*hstate{s}
	}
	return nil
}

// historyModel is the idempotency contract as porcupine's model, one
// partition per charge key (the charge, its refunds and its reads).
// Nondeterministic: an attempt without an answer (or with a 5xx) may or
// may not have taken effect, and its end is unbounded, so it may take
// effect any time after it started.
func historyModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
			index := map[string]int{}
			var parts [][]porcupine.Operation
			for _, op := range ops {
				p := op.Input.(opInput).part
				i, ok := index[p]
				if !ok {
					i = len(parts)
					index[p] = i
					parts = append(parts, nil)
				}
				parts[i] = append(parts[i], op)
			}
			return parts
		},
		Init: func() []any { return []any{(&hstate{}).seal()} },
		Step: func(state, input, output any) []any {
			next := step(state.(*hstate), input.(opInput), output.(opOutput))
			out := make([]any, len(next))
			for i, n := range next {
				out[i] = n
			}
			return out
		},
		Equal: func(a, b any) bool { return a.(*hstate).enc == b.(*hstate).enc },
		Hash: func(state any) uint64 {
			h := fnv.New64a()
			h.Write([]byte(state.(*hstate).enc))
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string { return describeOp(input.(opInput), output.(opOutput)) },
		DescribeState:     func(state any) string { return describeState(state.(*hstate)) },
	}
	return nm.ToModel()
}

// describeOp shows an operation, its key redacted.
func describeOp(in opInput, out opOutput) string {
	var what string
	switch in.kind {
	case opCharge:
		what = fmt.Sprintf("charge %s of %d (body %s)", redactKey(in.key), in.amount, in.fp)
	case opRefund:
		want := "all that is left"
		if in.amount > 0 {
			want = fmt.Sprint(in.amount)
		}
		what = fmt.Sprintf("refund %s of %s (body %s)", redactKey(in.key), want, in.fp)
	case opCapture:
		want := "all authorized"
		if in.amount > 0 {
			want = fmt.Sprint(in.amount)
		}
		what = fmt.Sprintf("capture %s of %s (body %s)", redactKey(in.key), want, in.fp)
	case opCancel:
		what = fmt.Sprintf("cancel %s (body %s)", redactKey(in.key), in.fp)
	default:
		what = "read " + in.charge
	}
	var got string
	switch {
	case out.status == 0:
		got = "no answer"
	case out.status == http.StatusCreated:
		got = fmt.Sprintf("201 %s (body %s)", out.id, out.body)
		if in.kind == opRefund || in.kind == opCapture || in.kind == opCancel {
			got = fmt.Sprintf("201 %s of %d (body %s)", out.id, out.amount, out.body)
		}
		if out.replayed {
			got += " replayed"
		}
	case out.status == http.StatusOK:
		got = "200 " + out.state
	default:
		got = strings.TrimSpace(fmt.Sprint(out.status, " ", out.code))
	}
	if out.unknown {
		got += ": outcome unknown"
	}
	if in.inFlight {
		what += ", another attempt in flight"
	}
	return what + " → " + got
}

func describeState(s *hstate) string {
	if !s.charge.stored() {
		return "no charge"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "charge %s of %d (body %s)", cmp.Or(s.charge.id, "(id not yet seen)"), s.amount, s.charge.fp)
	if s.read != "" {
		fmt.Fprintf(&b, ", read %s", s.read)
	}
	for _, r := range s.refunds {
		fmt.Fprintf(&b, "; refund %s %s of %d", redactKey(r.key), cmp.Or(r.rec.id, "(id not yet seen)"), r.rec.amount)
	}
	if len(s.refunds) > 0 {
		fmt.Fprintf(&b, "; %d left", s.amount-s.reserved)
	}
	for _, r := range s.ops {
		fmt.Fprintf(&b, "; capture or cancel %s %s of %d", redactKey(r.key), cmp.Or(r.rec.id, "(id not yet seen)"), r.rec.amount)
	}
	return b.String()
}

// operations turns a run's attempts into porcupine's operations: each
// read joins the partition of the charge key whose 201 named its id (a
// read of a charge never acknowledged is dropped), and each attempt is
// marked inFlight when another attempt with its key that may have held
// the key overlaps it: an unknown one, a 201 that created, a refund's
// refusal (read under the charge's lock).
func operations(attempts []attempt) []porcupine.Operation {
	partOf := map[string]string{}
	for _, a := range attempts {
		if a.in.kind == opCharge && a.out.status == http.StatusCreated && a.out.id != "" {
			partOf[a.out.id] = a.in.part
		}
	}
	holders := map[string][]attempt{}
	for _, a := range attempts {
		if a.in.key != "" && (a.out.unknown || a.out.status == http.StatusCreated && !a.out.replayed ||
			a.out.status == http.StatusConflict && a.out.code != codeRequestInProgress) {
			holders[a.in.key] = append(holders[a.in.key], a)
		}
	}
	ops := make([]porcupine.Operation, 0, len(attempts))
	for _, a := range attempts {
		in := a.in
		if in.kind == opRead {
			if in.part = partOf[in.charge]; in.part == "" {
				continue
			}
		}
		if a.out.status == http.StatusConflict && a.out.code == codeRequestInProgress {
			for _, h := range holders[in.key] {
				if h.start <= a.end && h.end >= a.start && (h.call != a.call || h.start != a.start) {
					in.inFlight = true
					break
				}
			}
		}
		ops = append(ops, porcupine.Operation{ClientId: a.call, Input: in, Output: a.out, Call: a.start, Return: a.end})
	}
	return ops
}

// checkHistory checks the attempts against the model within timeout. For
// each partition that is not linearizable it returns a violation; the
// first is shown as text, and the visualization of the first few is
// written into dir (when dir is set).
func checkHistory(attempts []attempt, timeout time.Duration, dir string) (res HistoryResult, _ []Violation) {
	began := time.Now()
	defer func() { res.Took = time.Since(began) }()
	model := historyModel()
	ops := operations(attempts)
	parts := model.Partition(ops)
	res = HistoryResult{Result: historyOK, Operations: len(ops), Partitions: len(parts)}
	result, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	switch result {
	case porcupine.Unknown:
		res.Result = historyUnknown
		return res, []Violation{{InvariantHistory, "unknown", fmt.Sprintf(
			"the check of %d operations in %d partitions did not finish within %s: neither a pass nor a violation", len(ops), len(parts), timeout)}}
	case porcupine.Ok:
		return res, nil
	}
	res.Result = historyIllegal
	var illegal [][]porcupine.Operation
	var firstPartials [][]int
	var out []Violation
	for i, linearizations := range info.PartialLinearizations() {
		longest := 0
		for _, l := range linearizations {
			longest = max(longest, len(l))
		}
		part := parts[i]
		if longest == len(part) {
			continue
		}
		if illegal == nil {
			firstPartials = linearizations
		}
		illegal = append(illegal, part)
		first := unplaced(part, linearizations)
		out = append(out, Violation{InvariantHistory, redactKey(part[0].Input.(opInput).part), fmt.Sprintf(
			"%d operations the idempotency contract cannot order; none places %s", len(part), describeOp(first.Input.(opInput), first.Output.(opOutput)))})
	}
	res.Found = len(illegal)
	if len(illegal) > 0 {
		res.Text = partitionText(illegal[0], firstPartials)
	}
	if dir != "" && len(illegal) > 0 {
		shown := slices.Concat(illegal[:min(len(illegal), 10)]...)
		renumberClients(shown)
		_, vinfo := porcupine.CheckOperationsVerbose(model, shown, timeout)
		path := filepath.Join(dir, "history.html")
		if err := porcupine.VisualizePath(model, vinfo, path); err == nil {
			res.Visualization = path
		}
	}
	return res, out
}

// unplaced is the operation of part, earliest first, that no partial
// linearization reaches: the first the contract cannot explain.
func unplaced(part []porcupine.Operation, linearizations [][]int) porcupine.Operation {
	placed := map[int]bool{}
	for _, l := range linearizations {
		for _, id := range l {
			placed[id] = true
		}
	}
	var first porcupine.Operation
	found := false
	for id, op := range part {
		if !placed[id] && (!found || op.Call < first.Call) {
			first, found = op, true
		}
	}
	if !found {
		return part[0]
	}
	return first
}

// partitionText shows a partition's operations by start, with times from
// its first start in milliseconds, and marks those no partial
// linearization places.
func partitionText(part []porcupine.Operation, linearizations [][]int) string {
	placed := map[int]bool{}
	for _, l := range linearizations {
		for _, id := range l {
			placed[id] = true
		}
	}
	order := make([]int, len(part))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(part[a].Call, part[b].Call) })
	t0 := part[order[0]].Call
	ms := func(t int64) string {
		if t == math.MaxInt64 {
			return "    ∞"
		}
		return fmt.Sprintf("%5.0f", float64(t-t0)/1e6)
	}
	var b strings.Builder
	for _, i := range order {
		mark := " "
		if !placed[i] {
			mark = "✗"
		}
		fmt.Fprintf(&b, "%s %s–%s ms  %s\n", mark, ms(part[i].Call), ms(part[i].Return), describeOp(part[i].Input.(opInput), part[i].Output.(opOutput)))
	}
	return b.String()
}

// renumberClients gives the operations of each partition lanes from 0,
// one per call of the library, as porcupine's page draws them.
func renumberClients(ops []porcupine.Operation) {
	type lane struct {
		part string
		call int
	}
	lanes, next := map[lane]int{}, map[string]int{}
	for i := range ops {
		l := lane{ops[i].Input.(opInput).part, ops[i].ClientId}
		n, ok := lanes[l]
		if !ok {
			n = next[l.part]
			next[l.part]++
			lanes[l] = n
		}
		ops[i].ClientId = n
	}
}

// checkHistory checks what the run's client saw, fills rep.History, and
// says so in the progress log: the first partition that is not
// linearizable as text, and where its visualization went.
func (s *system) checkHistory(rep *Report) []Violation {
	res, violations := checkHistory(s.client.history.attempts(), s.t.historyCheck, s.dir)
	rep.History = res
	if n := s.client.replaced.Load(); n > 0 {
		rep.Fired["broken:replay_in_progress"] = int(n)
	}
	s.mu.Lock()
	s.measured["history check"] = res.Took
	s.mu.Unlock()
	s.logf("history: %d operations in %d partitions, %s, checked in %s", res.Operations, res.Partitions, res.Result, res.Took.Round(time.Millisecond))
	if res.Text != "" {
		s.logf("history: %d partitions are not linearizable; the first:\n%s  visualization: %s (in the run's folder, kept when the run fails or with --keep)",
			res.Found, res.Text, cmp.Or(res.Visualization, "not written"))
	}
	return violations
}

// uncaught lists the invariants of mustCatch that a negative control's
// report does not show caught; a history check that ran out of time
// caught nothing.
func uncaught(mustCatch []string, r Report) []string {
	var out []string
	for _, inv := range mustCatch {
		if r.Counts[inv] == 0 || inv == InvariantHistory && r.History.Result != historyIllegal {
			out = append(out, inv)
		}
	}
	return out
}
