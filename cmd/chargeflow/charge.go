package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/chargeflow/chargeflow/client"
)

// The charge commands are a client of the API: the same endpoints, the same
// authentication and the same audit trail as any client, so there is one
// implementation of every action. Reads, creates, refunds, captures and
// cancels are a merchant's (a tenant's API key); reconcile and resolve are
// an operator's (an operator token, against /ops/v1; the operator named in
// the audit trail is the token's). Each prints what the API answered: a
// table on a terminal, the API's own JSON with --output json (or when
// stdout is not a terminal); a refusal is one line on stderr and an exit
// code (docs/operations.md, "Exit codes").
func chargeCommands() []command {
	return []command{
		{name: "create", summary: "create a charge through chargeflow/client: one idempotency key (printed) kept across every retry", run: runChargeCreate},
		{name: "refund", args: "CHARGE_ID", summary: "refund a charge, or part of it, through chargeflow/client", run: runChargeRefund},
		{name: "capture", args: "CHARGE_ID", summary: "capture a charge created with --no-capture, or part of it, through chargeflow/client", run: runChargeCapture},
		{name: "cancel", args: "CHARGE_ID", summary: "release a charge created with --no-capture, taking nothing, through chargeflow/client", run: runChargeCancel},
		{name: "list", summary: "one page of the tenant's charges, newest first", run: runChargeList},
		{name: "get", args: "ID", summary: "a charge", run: runChargeGet},
		{name: "events", args: "ID", summary: "a charge's audit trail: every move and operator action, oldest first", run: runChargeEvents},
		{name: "reconcile", args: "ID", summary: "make an unknown charge's lookup due now (an admin's token)", run: runChargeReconcile},
		{name: "resolve", args: "ID", summary: "resolve a needs_review charge, held to the provider's records (an admin's token)", run: runChargeResolve},
	}
}

// chargeSettings are the flags of the charge commands that come from the
// environment too (CHARGEFLOW_API_URL, CHARGEFLOW_API_KEY,
// CHARGEFLOW_OPERATOR_TOKEN); the others say what one call does.
var chargeSettings = []string{"api-url", "api-key", "operator-token"}

// apiFlags are the flags every charge command has: where the API is, the
// credential and the output format.
type apiFlags struct {
	apiURL     string
	credential string
	operator   bool
	output     outputFlag
}

// bind registers them; an operator command takes an operator token, the
// others a tenant's API key.
func (a *apiFlags) bind(fs *flag.FlagSet, operator bool) {
	a.operator = operator
	fs.StringVar(&a.apiURL, "api-url", "http://127.0.0.1:8080", "the API's base URL")
	// Registered without a default, so that -h cannot print a credential.
	if operator {
		fs.StringVar(&a.credential, "operator-token", "", "an admin operator's token (set it from the environment: a flag shows in ps)")
	} else {
		fs.StringVar(&a.credential, "api-key", "", "the tenant's API key (set it from the environment: a flag shows in ps)")
	}
	a.output.bind(fs)
}

// parse parses a charge command's flags and checks its credential and its
// positional arguments, which it returns.
func (a *apiFlags) parse(fs *flag.FlagSet, e env, args []string, names ...string) ([]string, error) {
	if err := parseToolFlags(fs, e, args, chargeSettings...); err != nil {
		return nil, err
	}
	pos, err := positional(fs, names...)
	if err != nil {
		return nil, err
	}
	if a.credential == "" {
		if a.operator {
			return nil, usageErrorf("%s: no operator token: set CHARGEFLOW_OPERATOR_TOKEN (chargeflow operator create)", strings.TrimPrefix(fs.Name(), "chargeflow "))
		}
		return nil, usageErrorf("%s: no API key: set CHARGEFLOW_API_KEY (chargeflow tenant create)", strings.TrimPrefix(fs.Name(), "chargeflow "))
	}
	return pos, nil
}

// call makes one request to the API and prints its answer as a resource
// of kind; a problem becomes the command's error, with its exit code.
func (a *apiFlags) call(ctx context.Context, e env, kind resourceKind, method, path string, body any) error {
	data, problem, err := apiRequest(ctx, a.apiURL, a.credential, method, path, body)
	if problem != nil {
		// A program reading JSON gets the problem document too, on stderr.
		if asJSON, _ := a.output.json(e); asJSON {
			fmt.Fprintln(e.stderr, strings.TrimSpace(string(problem)))
		}
	}
	if err != nil {
		return err
	}
	return printResource(e, a.output, kind, data)
}

func runChargeCreate(ctx context.Context, e env, args []string) error {
	var a apiFlags
	var p client.ChargeParams
	var wait bool
	metadata := metadataFlag{}
	fs := newFlagSet("charge create", e)
	a.bind(fs, false)
	fs.Int64Var(&p.Amount, "amount", 0, "in the currency's minor unit (1000 is 10.00 USD); required")
	fs.StringVar(&p.Currency, "currency", "USD", "ISO 4217 code")
	fs.StringVar(&p.PaymentMethod, "payment-method", "pm_card_visa", "a payment method token (never a card number)")
	fs.StringVar(&p.Description, "description", "", "what the charge is for, shown to the merchant only")
	fs.Var(metadata, "metadata", "a key=value to keep with the charge; repeat it for more")
	fs.StringVar(&p.IdempotencyKey, "key", "", "the idempotency key, 16 to 255 characters (default: a new one, printed; reuse it to retry)")
	fs.BoolVar(&p.CaptureLater, "no-capture", false, "only authorize it: it waits in requires_capture for charge capture or charge cancel")
	fs.BoolVar(&wait, "wait", false, "wait for the charge's outcome (succeeded, failed or needs_review; requires_capture with --no-capture)")
	if _, err := a.parse(fs, e, args); err != nil {
		return err
	}
	if p.Amount <= 0 {
		return usageErrorf("charge create: --amount is required, in the currency's minor unit")
	}
	p.Metadata = metadata
	c, err := client.New(a.apiURL, a.credential)
	if err != nil {
		return usageErrorf("charge create: %v", err)
	}
	p.IdempotencyKey = cmp.Or(p.IdempotencyKey, client.NewIdempotencyKey())
	fmt.Fprintf(e.stderr, "idempotency key: %s\n", p.IdempotencyKey)
	charge, err := c.CreateCharge(ctx, p)
	if err == nil && wait {
		charge, err = c.WaitForOutcome(ctx, charge.ID)
	}
	if err != nil {
		return clientError("charge create", err)
	}
	// What get would print: the charge as the API shows it now.
	return a.call(ctx, e, kindCharge, http.MethodGet, "/v1/charges/"+url.PathEscape(charge.ID), nil)
}

func runChargeRefund(ctx context.Context, e env, args []string) error {
	var a apiFlags
	var p client.RefundParams
	var reason string
	var wait bool
	fs := newFlagSet("charge refund", e)
	a.bind(fs, false)
	fs.Int64Var(&p.Amount, "amount", 0, "in the currency's minor unit (default: what is left of the charge)")
	fs.StringVar(&reason, "reason", "", "requested_by_customer, duplicate or fraudulent")
	fs.StringVar(&p.IdempotencyKey, "key", "", "the idempotency key, 16 to 255 characters (default: a new one, printed; reuse it to retry)")
	fs.BoolVar(&wait, "wait", false, "wait for the refund's outcome (succeeded, failed or needs_review)")
	pos, err := a.parse(fs, e, args, "CHARGE_ID")
	if err != nil {
		return err
	}
	p.Charge, p.Reason = pos[0], client.RefundReason(reason)
	c, err := client.New(a.apiURL, a.credential)
	if err != nil {
		return usageErrorf("charge refund: %v", err)
	}
	p.IdempotencyKey = cmp.Or(p.IdempotencyKey, client.NewIdempotencyKey())
	fmt.Fprintf(e.stderr, "idempotency key: %s\n", p.IdempotencyKey)
	refund, err := c.CreateRefund(ctx, p)
	if err == nil && wait {
		refund, err = c.WaitForRefund(ctx, refund.ID)
	}
	if err != nil {
		return clientError("charge refund", err)
	}
	return a.call(ctx, e, kindRefund, http.MethodGet, "/v1/refunds/"+url.PathEscape(refund.ID), nil)
}

func runChargeCapture(ctx context.Context, e env, args []string) error {
	var amount int64
	return runChargeOperation(ctx, e, args, operationCommand{
		name: "charge capture", path: "/v1/captures/", wait: (*client.Client).WaitForCapture,
		flags: func(fs *flag.FlagSet) {
			fs.Int64Var(&amount, "amount", 0, "in the currency's minor unit, at most what was authorized; the rest is released (default: all of it)")
		},
		create: func(c *client.Client, chargeID, key string) (*client.Operation, error) {
			return c.CaptureCharge(ctx, chargeID, client.CaptureParams{Amount: amount, IdempotencyKey: key})
		},
	})
}

func runChargeCancel(ctx context.Context, e env, args []string) error {
	return runChargeOperation(ctx, e, args, operationCommand{
		name: "charge cancel", path: "/v1/cancels/", wait: (*client.Client).WaitForCancel,
		create: func(c *client.Client, chargeID, key string) (*client.Operation, error) {
			return c.CancelCharge(ctx, chargeID, client.CancelParams{IdempotencyKey: key})
		},
	})
}

// operationCommand is what charge capture and charge cancel do differently:
// their flags beyond the common ones, the create, the wait for its outcome,
// and where the API shows the operation (path + its id).
type operationCommand struct {
	name   string
	path   string
	flags  func(*flag.FlagSet)
	create func(c *client.Client, chargeID, key string) (*client.Operation, error)
	wait   func(c *client.Client, ctx context.Context, id string) (*client.Operation, error)
}

// runChargeOperation runs capture or cancel as refund runs: the key given
// or a new one, printed so that a retry can reuse it, and the operation as
// the API shows it now.
func runChargeOperation(ctx context.Context, e env, args []string, cmd operationCommand) error {
	var a apiFlags
	var key string
	var wait bool
	fs := newFlagSet(cmd.name, e)
	a.bind(fs, false)
	if cmd.flags != nil {
		cmd.flags(fs)
	}
	fs.StringVar(&key, "key", "", "the idempotency key, 16 to 255 characters (default: a new one, printed; reuse it to retry)")
	fs.BoolVar(&wait, "wait", false, "wait for its outcome (succeeded, failed or needs_review)")
	pos, err := a.parse(fs, e, args, "CHARGE_ID")
	if err != nil {
		return err
	}
	c, err := client.New(a.apiURL, a.credential)
	if err != nil {
		return usageErrorf("%s: %v", cmd.name, err)
	}
	key = cmp.Or(key, client.NewIdempotencyKey())
	fmt.Fprintf(e.stderr, "idempotency key: %s\n", key)
	op, err := cmd.create(c, pos[0], key)
	if err == nil && wait {
		op, err = cmd.wait(c, ctx, op.ID)
	}
	if err != nil {
		return clientError(cmd.name, err)
	}
	return a.call(ctx, e, kindOperation, http.MethodGet, cmd.path+url.PathEscape(op.ID), nil)
}

func runChargeList(ctx context.Context, e env, args []string) error {
	var a apiFlags
	var status, startingAfter string
	var limit int
	fs := newFlagSet("charge list", e)
	a.bind(fs, false)
	fs.StringVar(&status, "status", "", "only charges in this state (pending, submitting, unknown, requires_capture, succeeded, canceled, failed, needs_review)")
	fs.IntVar(&limit, "limit", 0, "page size, 1 to 100 (default 10)")
	fs.StringVar(&startingAfter, "starting-after", "", "the last id of the previous page")
	if _, err := a.parse(fs, e, args); err != nil {
		return err
	}
	q := url.Values{}
	if status != "" {
		q.Set("status", status)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if startingAfter != "" {
		q.Set("starting_after", startingAfter)
	}
	path := "/v1/charges"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return a.call(ctx, e, kindChargeList, http.MethodGet, path, nil)
}

func runChargeGet(ctx context.Context, e env, args []string) error {
	return readCharge(ctx, e, args, "charge get", kindCharge, "")
}

func runChargeEvents(ctx context.Context, e env, args []string) error {
	return readCharge(ctx, e, args, "charge events", kindAuditTrail, "/events")
}

// readCharge is get and events: a GET of a charge, or of what is under it.
func readCharge(ctx context.Context, e env, args []string, name string, kind resourceKind, under string) error {
	var a apiFlags
	fs := newFlagSet(name, e)
	a.bind(fs, false)
	pos, err := a.parse(fs, e, args, "ID")
	if err != nil {
		return err
	}
	return a.call(ctx, e, kind, http.MethodGet, "/v1/charges/"+url.PathEscape(pos[0])+under, nil)
}

func runChargeReconcile(ctx context.Context, e env, args []string) error {
	var a apiFlags
	fs := newFlagSet("charge reconcile", e)
	a.bind(fs, true)
	pos, err := a.parse(fs, e, args, "ID")
	if err != nil {
		return err
	}
	return a.call(ctx, e, kindCharge, http.MethodPost, "/ops/v1/charges/"+url.PathEscape(pos[0])+"/reconcile", nil)
}

func runChargeResolve(ctx context.Context, e env, args []string) error {
	var a apiFlags
	var status, evidence, providerChargeID, failureCode string
	fs := newFlagSet("charge resolve", e)
	a.bind(fs, true)
	fs.StringVar(&status, "status", "", "succeeded, failed or pending (a new attempt with the same provider key); required")
	fs.StringVar(&evidence, "evidence", "", "what you checked and where (recorded in the charge's audit trail); required")
	fs.StringVar(&providerChargeID, "provider-charge-id", "", "the provider's charge id (with --status succeeded)")
	fs.StringVar(&failureCode, "failure-code", "", "the failure code (with --status failed)")
	pos, err := a.parse(fs, e, args, "ID")
	if err != nil {
		return err
	}
	body := map[string]string{"status": status, "evidence": evidence}
	if providerChargeID != "" {
		body["provider_charge_id"] = providerChargeID
	}
	if failureCode != "" {
		body["failure_code"] = failureCode
	}
	return a.call(ctx, e, kindCharge, http.MethodPost, "/ops/v1/charges/"+url.PathEscape(pos[0])+"/resolve", body)
}

// metadataFlag is --metadata key=value, repeated.
type metadataFlag map[string]string

func (m metadataFlag) String() string {
	pairs := make([]string, 0, len(m))
	for k, v := range m {
		pairs = append(pairs, k+"="+v)
	}
	return strings.Join(pairs, ",")
}

func (m metadataFlag) Set(value string) error {
	k, v, ok := strings.Cut(value, "=")
	if !ok || k == "" {
		return errors.New("want key=value")
	}
	m[k] = v
	return nil
}

// clientError gives an error of chargeflow/client its exit code: a problem
// by its status, an unknown outcome or an unreachable API as unavailable.
func clientError(name string, err error) error {
	var p *client.Error
	if errors.As(err, &p) {
		return withExit(statusExit(p.Status), fmt.Errorf("%s: %w", name, err))
	}
	return withExit(exitUnavailable, fmt.Errorf("%s: %w", name, err))
}

// statusExit is the exit code of an API answer's status.
func statusExit(status int) int {
	switch {
	case status < 400:
		return exitOK
	case status == http.StatusNotFound:
		return exitNotFound
	case status == http.StatusTooManyRequests || status >= 500:
		return exitUnavailable
	}
	return exitRefused
}

// encodeBody is a request body as JSON, or nil.
func encodeBody(body any) ([]byte, error) {
	if body == nil {
		return nil, nil
	}
	return json.Marshal(body)
}
