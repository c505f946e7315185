package fakepsp

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file is the Stripe protocol's reads: retrieve a PaymentIntent by id,
// search them by metadata, list them by creation time, and the retrieve and
// list that refunds share with them (stripe_refund.go). Retrieves and lists
// are strongly consistent; the search is not (lookup_lag). Which lookup
// fault acts on which read is in docs/provider.md.

const (
	// defaultStripeLimit and maxStripeLimit bound a page of a list or
	// search, as Stripe does.
	defaultStripeLimit = 10
	maxStripeLimit     = 100
)

// stripeList is Stripe's list answer, of PaymentIntents or of refunds.
type stripeList[T any] struct {
	Object  string `json:"object"`
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
	URL     string `json:"url"`
}

// stripeSearchResult is Stripe's search answer. NextPage is null on the
// last page.
type stripeSearchResult struct {
	Object   string                `json:"object"`
	Data     []stripePaymentIntent `json:"data"`
	HasMore  bool                  `json:"has_more"`
	NextPage *string               `json:"next_page"`
	URL      string                `json:"url"`
}

// stripeLookupFaults draws and applies the lookup faults for one Stripe
// read. The rules' key_prefix is matched against subject, the reference
// (our charge id) the read is about, "" when it is about no single one.
// lookup_lag can only fire on the search (lagged). It returns the decision
// and whether the fault already answered.
func (s *Server) stripeLookupFaults(w http.ResponseWriter, r *http.Request, subject string, lagged bool) (decision, bool) {
	d := s.drawFault(OnLookup, subject, func(fault string) bool {
		return lagged || fault != FaultLookupLag
	})
	switch d.fault {
	case FaultLatency:
		s.wait(d.duration)
	case FaultUnavailable:
		if d.duration > 0 {
			s.hold(r.Context(), d.duration)
			s.dropConnection(w, false)
			return d, true
		}
		w.Header().Set("Stripe-Should-Retry", "true")
		writeStripeError(w, http.StatusServiceUnavailable, stripeError{Type: stripeAPIError,
			Message: "The service is unavailable (injected fault unavailable)."})
		return d, true
	}
	return d, false
}

// handleStripeRetrieve serves GET /v1/payment_intents/{id}: strongly
// consistent, so a PaymentIntent is there as soon as its create answered.
func (s *Server) handleStripeRetrieve(w http.ResponseWriter, r *http.Request) {
	s.stripeRetrieve(w, r, stripeRetrieval{kind: kindCharge, name: "PaymentIntent",
		show: func(c *record) any { return s.stripeIntentNow(c) }, failure: stripeChargeAnswers{}.failure})
}

// stripeRetrieval is what a retrieve by id finds: the record of one kind,
// named name in a not-found, shown by show.
type stripeRetrieval struct {
	kind    string
	name    string
	show    func(c *record) any
	failure func(w http.ResponseWriter, f failure)
}

// stripeRetrieve serves a retrieve by id, through the lookup faults; the
// rules' key_prefix is matched against the record's reference. It is
// strongly consistent: lookup_lag is skipped without a draw. An unknown id
// is 404 resource_missing.
func (s *Server) stripeRetrieve(w http.ResponseWriter, r *http.Request, retrieval stripeRetrieval) {
	id := r.PathValue("id")
	if !checkStripeQuery(w, r.URL.Query()) {
		return
	}
	c := s.find(retrieval.kind, id)

	subject := ""
	if c != nil {
		subject = c.Reference
	}
	if _, answered := s.stripeLookupFaults(w, r, subject, false); answered {
		return
	}
	if c == nil {
		writeStripeError(w, http.StatusNotFound, stripeParamError("id", "resource_missing", "No such "+retrieval.name+": '"+id+"'."))
		return
	}
	if err := c.committed.wait(); err != nil {
		retrieval.failure(w, s.applyFailure(err))
		return
	}
	writeJSON(w, http.StatusOK, retrieval.show(c))
}

// handleStripeSearch serves GET /v1/payment_intents/search, newest first.
// Under lookup_lag a PaymentIntent created less than the fault's duration
// ago is not in the index yet.
func (s *Server) handleStripeSearch(w http.ResponseWriter, r *http.Request) {
	values := r.URL.Query()
	if !checkStripeQuery(w, values, "query", "limit", "page") {
		return
	}
	query, err := parseStripeQuery(values.Get("query"))
	if err != nil {
		writeStripeError(w, http.StatusBadRequest, *err)
		return
	}
	limit, ok := stripeLimit(w, values)
	if !ok {
		return
	}
	after, ok := s.stripeCursor(w, values, "page", kindCharge, "PaymentIntent")
	if !ok {
		return
	}

	d, answered := s.stripeLookupFaults(w, r, query.metadata[MetadataCharge], true)
	if answered {
		return
	}
	now := s.now()
	from := len(s.ledgerView())
	if after != nil {
		from = after.position
	}
	found, more := olderThan(s.ledgerView(), from, limit, func(c *record) bool {
		if d.fault == FaultLookupLag && now.Sub(c.CreatedAt) < d.duration {
			return false // not indexed yet
		}
		return query.matches(c, now)
	})

	result := stripeSearchResult{Object: "search_result", Data: []stripePaymentIntent{}, URL: "/v1/payment_intents/search"}
	if more {
		result.HasMore = true
		next := found[len(found)-1].ID
		result.NextPage = &next
	}
	for _, c := range found {
		result.Data = append(result.Data, s.stripeIntentNow(c))
	}
	writeJSON(w, http.StatusOK, result)
}

// handleStripeList serves GET /v1/payment_intents: newest first, filtered
// by created, with cursor pagination. It is not lagged: Stripe's lists are
// served from the same store as retrieve.
func (s *Server) handleStripeList(w http.ResponseWriter, r *http.Request) {
	values := r.URL.Query()
	if !checkStripeQuery(w, values, stripePagingParams...) {
		return
	}
	paging, ok := s.readStripePaging(w, values, kindCharge, "PaymentIntent")
	if !ok {
		return
	}

	if _, answered := s.stripeLookupFaults(w, r, "", false); answered {
		return
	}
	page, hasMore := paging.page(s.ledgerView())
	list := stripeList[stripePaymentIntent]{Object: "list", Data: []stripePaymentIntent{}, HasMore: hasMore, URL: "/v1/payment_intents"}
	for _, c := range page {
		list.Data = append(list.Data, s.stripeIntentNow(c))
	}
	writeJSON(w, http.StatusOK, list)
}

// stripePagingParams are the query parameters of a list's paging.
var stripePagingParams = []string{"limit", "starting_after", "ending_before",
	"created", "created[gt]", "created[gte]", "created[lt]", "created[lte]"}

// stripePaging is a list's paging: how many, which creation times, and
// from which cursor, if any.
type stripePaging struct {
	limit   int
	created createdRange
	after   *record
	before  *record
}

// readStripePaging reads a list's paging parameters; a cursor is the id of
// a record of kind, named name in a not-found. It answers 400 and returns
// false when they are not acceptable.
func (s *Server) readStripePaging(w http.ResponseWriter, values url.Values, kind, name string) (stripePaging, bool) {
	var paging stripePaging
	var ok bool
	if paging.limit, ok = stripeLimit(w, values); !ok {
		return paging, false
	}
	if paging.created, ok = parseCreatedRange(w, values); !ok {
		return paging, false
	}
	if paging.after, ok = s.stripeCursor(w, values, "starting_after", kind, name); !ok {
		return paging, false
	}
	if paging.before, ok = s.stripeCursor(w, values, "ending_before", kind, name); !ok {
		return paging, false
	}
	if paging.after != nil && paging.before != nil {
		writeStripeError(w, http.StatusBadRequest, stripeParamError("ending_before", "parameters_exclusive",
			"starting_after and ending_before cannot be used together."))
		return paging, false
	}
	return paging, true
}

// page returns the page of source (records in ledger order) that the
// paging asks for, newest first, and whether there is more beyond it. A
// cursor must be in source.
func (p stripePaging) page(source []*record) ([]*record, bool) {
	inRange := func(c *record) bool { return p.created.contains(c.CreatedAt.Unix()) }
	switch {
	case p.before != nil:
		// The limit records just newer than the cursor, still newest first.
		page, hasMore := newerThan(source, indexIn(source, p.before), p.limit, inRange)
		slices.Reverse(page)
		return page, hasMore
	case p.after != nil:
		return olderThan(source, indexIn(source, p.after), p.limit, inRange)
	default:
		return olderThan(source, len(source), p.limit, inRange)
	}
}

// indexIn returns the index of c in source: its position when source is
// the whole ledger of its kind, else found by a walk, which only a short
// list (the refunds of one charge) takes.
func indexIn(source []*record, c *record) int {
	if c.position < len(source) && source[c.position] == c {
		return c.position
	}
	return slices.Index(source, c)
}

// ledgerView returns the charges in ledger order, oldest first. s.charges
// only grows and a charge never changes once appended, so the slice is
// read without s.mu; a page costs the charges it walks, never a copy of the
// ledger.
func (s *Server) ledgerView() []*record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.charges
}

// olderThan returns, newest first, up to limit of the durable records that
// keep accepts among those before index end, and whether there is another.
func olderThan(records []*record, end, limit int, keep func(*record) bool) ([]*record, bool) {
	var page []*record
	for i := end - 1; i >= 0; i-- {
		if c := records[i]; c.committed.durable() && keep(c) {
			if len(page) == limit {
				return page, true
			}
			page = append(page, c)
		}
	}
	return page, false
}

// newerThan returns, oldest first, up to limit of the durable records that
// keep accepts among those after index start, and whether there is
// another.
func newerThan(records []*record, start, limit int, keep func(*record) bool) ([]*record, bool) {
	var page []*record
	for i := start + 1; i < len(records); i++ {
		if c := records[i]; c.committed.durable() && keep(c) {
			if len(page) == limit {
				return page, true
			}
			page = append(page, c)
		}
	}
	return page, false
}

// checkStripeQuery answers 400 for a query parameter the read does not
// take. expand is refused too: the fake expands nothing.
func checkStripeQuery(w http.ResponseWriter, values url.Values, allowed ...string) bool {
	for _, name := range sortedNames(values) {
		known := false
		for _, a := range allowed {
			known = known || name == a
		}
		if !known {
			writeStripeError(w, http.StatusBadRequest, stripeParamError(name, "parameter_unknown", "Received unknown parameter: "+name+"."))
			return false
		}
		if len(values[name]) > 1 {
			writeStripeError(w, http.StatusBadRequest, stripeParamError(name, "", "The parameter "+name+" was sent more than once."))
			return false
		}
	}
	return true
}

// stripeLimit reads limit: 1 to 100, 10 when absent.
func stripeLimit(w http.ResponseWriter, values url.Values) (int, bool) {
	raw := values.Get("limit")
	if raw == "" {
		return defaultStripeLimit, true
	}
	limit, err := strconv.Atoi(raw)
	if err != nil || limit < 1 || limit > maxStripeLimit {
		writeStripeError(w, http.StatusBadRequest, stripeParamError("limit", "", "limit must be an integer from 1 to 100."))
		return 0, false
	}
	return limit, true
}

// stripeCursor reads a cursor parameter, the id of a record of kind (a
// PaymentIntent, a refund), and returns that record, nil when the parameter
// is absent; name names the kind in a not-found. The search's page token is
// such an id too: the fake's tokens are opaque to clients all the same.
func (s *Server) stripeCursor(w http.ResponseWriter, values url.Values, param, kind, name string) (*record, bool) {
	id := values.Get(param)
	if id == "" {
		return nil, true
	}
	c := s.find(kind, id)
	if c == nil {
		writeStripeError(w, http.StatusBadRequest, stripeParamError(param, "resource_missing", "No such "+name+": '"+id+"'."))
		return nil, false
	}
	return c, true
}

// createdRange is a list's created filter, in unix seconds, inclusive.
type createdRange struct {
	from, to int64
}

func (c createdRange) contains(created int64) bool {
	return created >= c.from && created <= c.to
}

// parseCreatedRange reads created (an exact second) and created[gt|gte|lt|lte].
func parseCreatedRange(w http.ResponseWriter, values url.Values) (createdRange, bool) {
	bounds := createdRange{from: minUnix, to: maxUnix}
	for _, param := range []string{"created", "created[gt]", "created[gte]", "created[lt]", "created[lte]"} {
		raw := values.Get(param)
		if raw == "" {
			continue
		}
		second, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			writeStripeError(w, http.StatusBadRequest, stripeParamError(param, "parameter_invalid_integer", param+" must be a unix time in seconds."))
			return createdRange{}, false
		}
		switch param {
		case "created":
			bounds.from, bounds.to = max(bounds.from, second), min(bounds.to, second)
		case "created[gt]":
			bounds.from = max(bounds.from, second+1)
		case "created[gte]":
			bounds.from = max(bounds.from, second)
		case "created[lt]":
			bounds.to = min(bounds.to, second-1)
		case "created[lte]":
			bounds.to = min(bounds.to, second)
		}
	}
	return bounds, true
}

// The widest created range: every time a ledger holds.
var (
	minUnix = time.Time{}.Unix()
	maxUnix = int64(1) << 62
)

// stripeQuery is a parsed search query: clauses joined by AND.
type stripeQuery struct {
	metadata map[string]string
	status   string
}

// matches reports whether c satisfies every clause at now, reading the
// charge as stripeIntent shows it without building the intent.
func (q stripeQuery) matches(c *record, now time.Time) bool {
	if q.status != "" && stripeStatus(c.holdAt(now, false)) != q.status {
		return false
	}
	for key, value := range q.metadata {
		if stripeMetadataValue(c, key) != value {
			return false
		}
	}
	return true
}

// parseStripeQuery parses the subset of Stripe's search language the fake
// models: clauses metadata['key']:'value' and status:'value' joined by AND,
// with single or double quotes and backslash escapes.
func parseStripeQuery(query string) (stripeQuery, *stripeError) {
	fail := func(message string) (stripeQuery, *stripeError) {
		e := stripeParamError("query", "", "Unsupported search query: "+message+
			". The fake provider understands metadata['key']:'value' and status:'value' clauses joined by AND.")
		return stripeQuery{}, &e
	}
	if strings.TrimSpace(query) == "" {
		e := stripeParamError("query", "parameter_missing", "Missing required param: query.")
		return stripeQuery{}, &e
	}

	parsed := stripeQuery{metadata: map[string]string{}}
	rest := strings.TrimSpace(query)
	for {
		var field, value string
		var ok bool
		switch {
		case strings.HasPrefix(rest, "metadata["):
			var key string
			if key, rest, ok = quoted(strings.TrimPrefix(rest, "metadata[")); !ok {
				return fail("a metadata key must be quoted")
			}
			if rest, ok = strings.CutPrefix(rest, "]"); !ok {
				return fail("metadata[ without its closing ]")
			}
			field = "metadata[" + key + "]"
		case strings.HasPrefix(rest, "status"):
			field, rest = "status", strings.TrimPrefix(rest, "status")
		default:
			return fail("no field the fake knows at " + strconv.Quote(rest))
		}
		if rest, ok = strings.CutPrefix(rest, ":"); !ok {
			return fail("a field must be followed by :")
		}
		if value, rest, ok = quoted(rest); !ok {
			return fail("a value must be quoted")
		}
		if key, isMetadata := strings.CutPrefix(field, "metadata["); isMetadata {
			parsed.metadata[strings.TrimSuffix(key, "]")] = value
		} else {
			parsed.status = value
		}

		rest = strings.TrimSpace(rest)
		if rest == "" {
			return parsed, nil
		}
		if rest, ok = strings.CutPrefix(rest, "AND "); !ok {
			return fail("clauses must be joined by AND")
		}
		rest = strings.TrimSpace(rest)
	}
}

// quoted reads a string in single or double quotes at the start of s, with
// backslash escaping the next character, and returns it and what follows.
func quoted(s string) (value, rest string, ok bool) {
	if s == "" || (s[0] != '\'' && s[0] != '"') {
		return "", s, false
	}
	quote := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 == len(s) {
				return "", s, false
			}
			i++
			b.WriteByte(s[i])
		case quote:
			return b.String(), s[i+1:], true
		default:
			b.WriteByte(s[i])
		}
	}
	return "", s, false
}
