package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// Every flag of a long-running command can be set from the environment, by
// one mechanism: parseFlags parses the command line, then walks the flag set
// and sets each flag the command line did not give from CHARGEFLOW_ and the
// flag's name upper-cased, dashes as underscores (--call-timeout ↔
// CHARGEFLOW_CALL_TIMEOUT). A flag added to any flag set needs no code of
// its own to get its variable; the reference table of docs/operations.md
// lists it (a test keeps that table in step with the flag sets).
//
// Precedence: a flag on the command line, then CHARGEFLOW_<NAME>, then the
// older well-known name of envAliases, then the flag's default. When both
// variable names of one flag are set, to different values, the command
// refuses to start rather than pick one. An empty variable counts as unset.

// envPrefix starts the variable of every flag.
const envPrefix = "CHARGEFLOW_"

// envName is the variable of the flag called name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// envAliases are the names some flags were read from before every flag had
// its CHARGEFLOW_ variable; they still work. Keyed by flag name: the alias
// applies in every command that has the flag.
var envAliases = map[string]string{
	"database-url":           "DATABASE_URL",
	"log-level":              "LOG_LEVEL",
	"psp":                    "PSP_KIND",
	"psp-url":                "PSP_URL",
	"stripe-api-key":         "STRIPE_API_KEY",
	"adyen-api-key":          "ADYEN_API_KEY",
	"psp-webhook-secret":     "PSP_WEBHOOK_SECRET",
	"webhook-secret":         "PSP_WEBHOOK_SECRET",
	"webhooks-allow-private": "WEBHOOKS_ALLOW_PRIVATE",
}

// secretFlags hold credentials: their values are never quoted in an error.
// They are best set from the environment, which ps does not show. A secret
// flag is registered without a default, so -h cannot print one either.
var secretFlags = map[string]bool{
	"database-url":       true, // may carry a password
	"stripe-api-key":     true,
	"adyen-api-key":      true,
	"psp-webhook-secret": true,
	"webhook-secret":     true,
	"api-key":            true,
	"operator-token":     true,
	"secret":             true, // listen's signing secret
}

// envNames are the variables that set flag name, the CHARGEFLOW_ one first.
func envNames(name string) []string {
	names := []string{envName(name)}
	if alias, ok := envAliases[name]; ok {
		names = append(names, alias)
	}
	return names
}

// parseFlags parses args into fs, then sets every flag the command line did
// not give from the environment, then holds every number to its bounds
// (checkFlags).
func parseFlags(fs *flag.FlagSet, e env, args []string) error {
	return parseWithEnv(fs, e, args, func(string) bool { return true })
}

// parseToolFlags is parseFlags for an operator tool (charge, tenant,
// scenario, …): only the flags named in settings — where the API or the
// database is, a credential — come from the environment. The tool's other
// flags say what this one run does (an amount, an idempotency key, a seed),
// and a variable left over in a shell must never change that.
func parseToolFlags(fs *flag.FlagSet, e env, args []string, settings ...string) error {
	return parseWithEnv(fs, e, args, func(name string) bool {
		for _, s := range settings {
			if s == name {
				return true
			}
		}
		return false
	})
}

// errInspected ends a command whose flag set env.inspect has taken.
var errInspected = errors.New("flag set inspected")

func parseWithEnv(fs *flag.FlagSet, e env, args []string, fromEnv func(string) bool) error {
	if e.inspect != nil {
		e.inspect(fs, fromEnv)
		return errInspected
	}
	if err := parseArgs(fs, e, args, fromEnv); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || !fromEnv(f.Name) {
			return
		}
		var from, value string
		for _, name := range envNames(f.Name) {
			v := e.getenv(name)
			switch {
			case v == "":
			case from == "":
				from, value = name, v
			case v != value:
				errs = append(errs, fmt.Errorf("%s and %s are both set, to different values: set one (--%s)", from, name, f.Name))
				return
			}
		}
		if from == "" {
			return
		}
		if err := f.Value.Set(value); err != nil {
			if secretFlags[f.Name] {
				errs = append(errs, fmt.Errorf("%s: not a valid value for --%s", from, f.Name))
			} else {
				errs = append(errs, fmt.Errorf("%s=%q: not a valid value for --%s: %w", from, value, f.Name, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return withExit(exitUsage, err)
	}
	return withExit(exitUsage, checkFlags(fs, fromEnv))
}

// envOnly are the variables the binary reads that are no flag's: test
// hooks, a data folder the scripts share, and OpenTelemetry's standard
// names. docs/operations.md lists them under the flags.
var envOnly = []struct {
	name, roles, meaning string
}{
	{"CHARGEFLOW_CRASHPOINTS", "api, worker, reconciler, all", "the lab build only (tests and scenarios): crash points to arm, `point=action[,…]` (\"Crash points\" below); the product build refuses to start when it is set"},
	{"CHARGEFLOW_CRASHPOINT_SEED", "api, worker, reconciler, all", "the lab build only: the seed of the crash points' draws (default: the clock); the product build refuses to start when it is set"},
	{"CHARGEFLOW_CLOCK_SKEW", "api, worker, reconciler, all", "the lab build only (tests and scenarios): a signed duration, e.g. `-4m`, that offsets the wall clock the role's decisions read (\"Clocks\" below); the product build refuses to start when it is set"},
	{"CHARGEFLOW_BROKEN", "worker", "the lab build's negative controls only: `resend_on_rerun` re-sends charges found submitting (can double-charge), `reroute_on_timeout` takes an unknown outcome for proof and sends the charge to the next account of its route (can charge twice across providers); either is loudly logged; the product build refuses to start when it is set"},
	{"CHARGEFLOW_DATA", "fakepsp, all", "the folder of local state (default `.data`): the fake provider's default ledger, and scripts/ensure-postgres's clusters"},
	{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "api, worker, reconciler, all", "an OTLP/HTTP traces URL, used as is (\"Metrics and traces\" below)"},
	{"OTEL_EXPORTER_OTLP_ENDPOINT", "api, worker, reconciler, all", "an OTLP/HTTP base URL; `/v1/traces` is appended"},
	{"OTEL_SERVICE_NAME", "api, worker, reconciler, all", "the traces' service name (default `chargeflow-ROLE`, `chargeflow` for all)"},
}
