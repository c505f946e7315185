package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/outbox"
	"github.com/chargeflow/chargeflow/psp"
	"github.com/chargeflow/chargeflow/reconciler"
)

// Every number a command takes — a duration, a count, a rate — is checked
// by one mechanism before the command does anything else: parseWithEnv
// reads the command line and the environment, then checkFlags holds each
// numeric flag to its entry in flagBounds, and the flags together to
// flagRelations. A value out of bounds stops the command, before any
// connection or listener is opened, with one line that names the flag, its
// variable and the values it takes. A numeric flag without an entry fails
// TestEveryNumericFlagHasBounds, so a flag added later cannot escape; the
// reference table of docs/operations.md shows each entry, and "Bounds"
// there says why each is what it is.

// number is what a numeric flag holds (flag.Getter's Get).
type number interface {
	~int | ~int64 | ~uint64 | ~float64
}

// span is the values of a numeric flag that start a sound process: min to
// max, and, when they have a meaning of their own, 0 and the negative
// values.
type span[T number] struct {
	min, max       T
	zero, negative string
}

// within accepts min to max.
func within[T number](min, max T) span[T] { return span[T]{min: min, max: max} }

// or0 accepts 0 too, which means what meaning says.
func (s span[T]) or0(meaning string) span[T] {
	s.zero = meaning
	return s
}

// orNegative accepts any negative value too, which means what meaning says.
func (s span[T]) orNegative(meaning string) span[T] {
	s.negative = meaning
	return s
}

func (s span[T]) accepts(v any) (bool, error) {
	x, ok := v.(T)
	if !ok {
		return false, fmt.Errorf("holds a %T, but its bounds are of %T", v, x)
	}
	return (x >= s.min && x <= s.max) || (x == 0 && s.zero != "") || (x < 0 && s.negative != ""), nil
}

func (s span[T]) String() string {
	text := showNumber(s.min) + " to " + showNumber(s.max)
	if s.zero != "" {
		text += "; 0: " + s.zero
	}
	if s.negative != "" {
		text += "; negative: " + s.negative
	}
	return text
}

// bound is a span of any number type.
type bound interface {
	accepts(v any) (bool, error)
	String() string
}

// showNumber writes a flag's value as the flag reads it.
func showNumber(v any) string {
	switch x := v.(type) {
	case time.Duration:
		return x.String()
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// flagBounds are the bounds of every numeric flag, by name ("--name"), or
// by command and name ("worker --max-conns") where one name means
// different things. Adding a flag's bounds is one line here.
var flagBounds = map[string]bound{
	// The provider client: api, worker, reconciler, all.
	"--call-timeout":      within(100*time.Millisecond, 5*time.Minute),
	"--stripe-clock-skew": within(time.Second, time.Hour),
	"--key-window":        within(time.Hour, 30*24*time.Hour),
	"--key-window-margin": within(5*time.Minute, 24*time.Hour),
	"--lookup-lag-bound":  within(time.Millisecond, 24*time.Hour).or0("unbounded: a not-found never proves anything"),
	"--shutdown-grace":    within(0, 10*time.Minute),

	// The API.
	"--lock-timeout":        within(time.Millisecond, api.Defaults().DBTimeout),
	"--rate-limit":          within(1, api.MaxRateLimit),
	"--rate-burst":          within(1, 2*int(api.MaxRateLimit)).or0("twice the rate"),
	"--auth-failure-limit":  within(1, 10_000),
	"--max-amount":          within[int64](api.MinMaxAmount, api.MaxMaxAmount),
	"--idempotency-ttl":     within(api.MinIdempotencyTTL, api.MaxIdempotencyTTL),
	"--replay-cache":        within(1, 1_000_000).orNegative("keeps none"),
	"--accept-batches":      within(1, 1000).orNegative("each charge in a statement of its own"),
	"--submit-max-attempts": within(1, 100),
	"--max-conns":           within(1, 1000).or0("the default"),
	"--reconcile-floor":     within(time.Second, 24*time.Hour),
	"--ops-session-ttl":     within(5*time.Minute, 7*24*time.Hour),

	// Webhooks: api, worker, all.
	"--webhook-concurrency": within(1, river.QueueNumWorkersMax),
	"--webhook-timeout":     within(time.Second, 5*time.Minute),
	"--webhook-retry-base":  within(10*time.Millisecond, time.Hour),
	"--webhook-retry-cap":   within(10*time.Millisecond, 24*time.Hour),

	// The worker; in `all` the worker runs on the API's pool.
	"worker --max-conns":    within(4, 1000).or0("the default"),
	"all --max-conns":       within(4, 1000).or0("the default"),
	"--concurrency":         within(1, river.QueueNumWorkersMax).or0("the default"),
	"--rescue-after":        within(time.Second, 24*time.Hour).or0("the default"),
	"--unknown-check-after": within(time.Millisecond, time.Hour),
	"--retry-base":          within(time.Millisecond, time.Hour),
	"--retry-cap":           within(time.Millisecond, 24*time.Hour),
	"--retention-interval":  within(time.Minute, 24*time.Hour),
	"--event-retention":     within(24*time.Hour, 10*365*24*time.Hour).or0("keeps them forever"),
	// Its circuit breaker per provider account.
	"--breaker-failures":        within(1, 1000),
	"--breaker-failure-ratio":   within(0.01, 1),
	"--breaker-min-calls":       within(1, 100_000),
	"--breaker-window":          within(100*time.Millisecond, 24*time.Hour),
	"--breaker-open-for":        within(100*time.Millisecond, 24*time.Hour),
	"--breaker-half-open-calls": within(1, 1000),

	// The reconciler.
	"--max-apply-delay":     within(0, 24*time.Hour),
	"--lookup-rate":         within(0.1, 100_000),
	"--stale-margin":        within(time.Second, 24*time.Hour),
	"--apply-margin":        within(100*time.Millisecond, time.Hour),
	"--max-attempts":        within(1, 100),
	"--max-unknown-age":     within(time.Second, 30*24*time.Hour),
	"--stranded-after":      within(time.Second, 24*time.Hour),
	"--lease-ttl":           within(time.Second, time.Hour),
	"--batch-size":          within(1, 1000),
	"--interval":            within(10*time.Millisecond, 10*time.Minute),
	"--lookup-backoff-base": within(10*time.Millisecond, time.Hour),
	"--lookup-backoff-cap":  within(10*time.Millisecond, 24*time.Hour),
	"--hold-margin":         within(time.Second, 30*24*time.Hour),
	"--hold-recheck":        within(time.Second, 24*time.Hour),

	// The bundled fake provider: fakepsp, all.
	"--hold-window": within(100*time.Millisecond, 31*24*time.Hour),

	// The operator tools.
	"--amount":                    within[int64](1, math.MaxInt64).or0("none given: a refund's default, what is left"),
	"--limit":                     within(1, 100).or0("the API's default"),
	"audit --limit":               within(1, 1000),
	"tenant rotate-key --overlap": within(0, 30*24*time.Hour),
	"healthcheck --timeout":       within(time.Millisecond, 10*time.Minute),
	"bench --duration":            within(100*time.Millisecond, 24*time.Hour),
	"--sustain":                   within(100*time.Millisecond, 24*time.Hour),
	"--api-max-conns":             within(1, 1000).or0("the API's default"),
	"--worker-concurrency":        within(1, river.QueueNumWorkersMax).or0("the worker's default"),
	"--scale":                     within(scaleEmpty, 100_000_000).or0("off: the ratios"),
	"--samples":                   within(20, 100_000),
	"--retention-duty":            within(0.01, 1),
	"scenario run --seed":         within[uint64](0, math.MaxUint64),
	"--charges":                   within(1, 1_000_000).or0("10000, or 2000 with --short"),
	"scenario run --duration":     within(0, 24*time.Hour),
	"--parallel":                  within(1, 16),
}

// scaleEmpty is the small size bench --scale compares with: the in-flight
// charges every seed holds, and a few hundred settled ones. It is here, not
// in bench.go, because the table above holds the flag to it in every build.
const scaleEmpty = 1000

// boundsOf are the bounds of flag name in command ("worker", "charge
// create"), if it has any.
func boundsOf(command, name string) (bound, bool) {
	if b, ok := flagBounds[command+" --"+name]; ok {
		return b, true
	}
	b, ok := flagBounds["--"+name]
	return b, ok
}

// numericValue is a flag's value when it is a number.
func numericValue(f *flag.Flag) (any, bool) {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return nil, false
	}
	switch v := g.Get().(type) {
	case int, int64, uint, uint64, float64, time.Duration:
		return v, true
	}
	return nil, false
}

// relation ties flags together: it holds in a command that has every flag
// it names, once each of them is within its own bounds.
type relation struct {
	flags []string
	// check says why the values are refused, or "".
	check func(v flagValues) string
}

// flagValues reads a parsed flag set's values for a relation.
type flagValues struct{ fs *flag.FlagSet }

func (v flagValues) get(name string) any           { return v.fs.Lookup(name).Value.(flag.Getter).Get() }
func (v flagValues) has(name string) bool          { return v.fs.Lookup(name) != nil }
func (v flagValues) dur(name string) time.Duration { return v.get(name).(time.Duration) }
func (v flagValues) int(name string) int           { return v.get(name).(int) }
func (v flagValues) float(name string) float64     { return v.get(name).(float64) }
func (v flagValues) bool(name string) bool         { return v.get(name).(bool) }

// backoff is the relation of a backoff's first wait and its cap.
func backoff(base, ceiling string) relation {
	return relation{flags: []string{base, ceiling}, check: func(v flagValues) string {
		if v.dur(base) > v.dur(ceiling) {
			return "the first wait cannot be longer than the longest"
		}
		return ""
	}}
}

// flagRelations are the rules between flags of one command.
var flagRelations = []relation{
	backoff("retry-base", "retry-cap"),
	backoff("webhook-retry-base", "webhook-retry-cap"),
	backoff("lookup-backoff-base", "lookup-backoff-cap"),
	{flags: []string{"rescue-after", "call-timeout"}, check: func(v flagValues) string {
		// River reruns a job running past rescue-after; a charge.submit run
		// takes up to outbox.JobTimeout, and the retention run gets the
		// rest, at least a second of it.
		least := outbox.JobTimeout(v.dur("call-timeout")) + time.Second
		if after := v.dur("rescue-after"); after != 0 && after < least {
			return fmt.Sprintf("River would rerun a charge.submit job still within its call (the call timeout + 5s), "+
				"and the retention run needs a second past that: want 0 or at least %s", least)
		}
		return ""
	}},
	{flags: []string{"lease-ttl", "call-timeout"}, check: func(v flagValues) string {
		if v.dur("lease-ttl") < v.dur("call-timeout") {
			return "a lease shorter than one lookup is lost during it, and another reconciler looks the charge up again"
		}
		return ""
	}},
	{flags: []string{"key-window-margin", "key-window"}, check: func(v flagValues) string {
		if v.dur("key-window-margin") >= v.dur("key-window") {
			return "the margin is taken from the window: it must be shorter"
		}
		return ""
	}},
	{flags: []string{"key-window-margin", "call-timeout"}, check: keyWindowMarginCoversResend},
	{flags: []string{"key-window", "key-window-margin", "call-timeout", "max-apply-delay", "apply-margin", "strong-lookup", "lookup-lag-bound"},
		check: proofFitsKeyWindow},
	{flags: []string{"lookup-lag-bound", "strong-lookup"}, check: func(v flagValues) string {
		if v.dur("lookup-lag-bound") > 0 && v.bool("strong-lookup") {
			return "a lag bound says the lookup lags: set --strong-lookup=false with it, or a not-found the lookup has not caught up with is trusted"
		}
		return ""
	}},
	{flags: []string{"accept-batches", "max-conns"}, check: func(v flagValues) string {
		conns := cmp.Or(v.int("max-conns"), app.Defaults().APIPool.MaxConns)
		if n := v.int("accept-batches"); n > conns {
			return fmt.Sprintf("each accept statement holds one of the pool's %d connections: more at once only wait for them", conns)
		}
		return ""
	}},
}

// keyWindowMarginCoversResend: a charge's key deadline (first send + key
// window − margin) is checked before its lookup is made, and a proven
// not-found is followed by a re-send that must reach the provider while it
// still remembers the key. So the margin must cover a lookup and the
// re-send's call: for the API, an operator's resolve (one lookup); for a
// reconciler, the last lookup of a full batch (reconciler.LookupSpan).
func keyWindowMarginCoversResend(v flagValues) string {
	call := v.dur("call-timeout")
	lookups := call
	if v.has("batch-size") && v.has("lookup-rate") {
		lookups = reconciler.Config{BatchSize: v.int("batch-size"),
			Provider: reconciler.Provider{LookupRate: v.float("lookup-rate")}}.LookupSpan(call)
	}
	if need := lookups + call; v.dur("key-window-margin") < need {
		return fmt.Sprintf("the margin must outlast a lookup made at the deadline and the re-send after it (%s with these settings), "+
			"or a not-found may come from a provider that has forgotten the key", need)
	}
	return ""
}

// proofFitsKeyWindow: a not-found proves nothing until the proof window has
// passed since the last send; a key window that ends (less its margin)
// before then sends every charge whose outcome is unknown to review.
func proofFitsKeyWindow(v flagValues) string {
	consistency := psp.Strong
	if !v.bool("strong-lookup") {
		consistency = psp.Eventual
	}
	caps := psp.Capabilities{Lookup: psp.LookupByKey, Consistency: consistency, LagBound: v.dur("lookup-lag-bound")}
	proof, provable := reconciler.ProofWindow(caps, v.dur("call-timeout"), v.dur("max-apply-delay"), v.dur("apply-margin"))
	if left := v.dur("key-window") - v.dur("key-window-margin"); provable && proof >= left {
		return fmt.Sprintf("a not-found is proven %s after a send (call timeout + max apply delay + apply margin, + lag bound), "+
			"not before the key window less its margin (%s) ends: every unknown outcome would need review", proof, left)
	}
	return ""
}

// flagNames names a flag, with its variable when the command reads it.
func flagNames(name string, fromEnv func(string) bool) string {
	if fromEnv(name) {
		return "--" + name + " (" + envName(name) + ")"
	}
	return "--" + name
}

// checkFlags holds a parsed flag set to its bounds, then its relations.
func checkFlags(fs *flag.FlagSet, fromEnv func(string) bool) error {
	command := strings.TrimPrefix(fs.Name(), "chargeflow ")
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		v, ok := numericValue(f)
		if !ok {
			return
		}
		b, ok := boundsOf(command, f.Name)
		if !ok {
			return // TestEveryNumericFlagHasBounds sees to it that none is left out
		}
		switch ok, err := b.accepts(v); {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s %w", flagNames(f.Name, fromEnv), err))
		case !ok:
			errs = append(errs, fmt.Errorf("%s is %s: want %s", flagNames(f.Name, fromEnv), showNumber(v), b))
		}
	})
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	values := flagValues{fs}
	for _, r := range flagRelations {
		if !all(r.flags, values.has) {
			continue
		}
		if why := r.check(values); why != "" {
			var given []string
			for _, name := range r.flags {
				given = append(given, flagNames(name, fromEnv)+" is "+show(values.get(name)))
			}
			errs = append(errs, fmt.Errorf("%s: %s", strings.Join(given, ", "), why))
		}
	}
	return errors.Join(errs...)
}

// show writes a value of any flag a relation reads.
func show(v any) string {
	if b, ok := v.(bool); ok {
		return strconv.FormatBool(b)
	}
	return showNumber(v)
}

func all(names []string, ok func(string) bool) bool {
	for _, n := range names {
		if !ok(n) {
			return false
		}
	}
	return true
}
