package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/chargeflow/chargeflow/client"
)

// runCharge is a client of the API: the same endpoints, the same
// authentication and the same audit trail as any client, so there is one
// implementation of every action. Reads are a merchant's (a tenant's API
// key); reconcile and resolve are an operator's (an operator token, against
// /ops/v1; the operator named in the audit trail is the token's).
//
//	chargeflow charge create --amount N --currency C --payment-method PM [--key K] [--wait]
//	chargeflow charge refund ID [--amount N] [--reason R] [--key K]
//	chargeflow charge list [--status S] [--limit N] [--starting-after ID]
//	chargeflow charge get ID
//	chargeflow charge events ID
//	chargeflow charge reconcile ID
//	chargeflow charge resolve ID --status succeeded|failed|pending --evidence TEXT
//	                             [--provider-charge-id PY] [--failure-code CODE]
func runCharge(ctx context.Context, e env, args []string) error {
	usage := errors.New("usage: chargeflow charge create|refund|list|get|events|reconcile|resolve [ID] [flags] " +
		"(API at --api-url; reads with --api-key or CHARGEFLOW_API_KEY, reconcile and resolve with --operator-token or CHARGEFLOW_OPERATOR_TOKEN)")
	if len(args) == 0 {
		return usage
	}
	action, args := args[0], args[1:]
	var apiURL, credential string
	fs := newFlagSet("charge "+action, e)
	fs.StringVar(&apiURL, "api-url", "http://127.0.0.1:8080", "the API's base URL")
	operatorAction := action == "reconcile" || action == "resolve"
	// Registered without a default, so that -h cannot print a credential.
	if operatorAction {
		fs.StringVar(&credential, "operator-token", "", "an admin operator's token (set it from the environment: a flag shows in ps)")
	} else {
		fs.StringVar(&credential, "api-key", "", "the tenant's API key (set it from the environment: a flag shows in ps)")
	}

	var method, path string
	var body []byte
	switch action {
	case "create", "refund":
		return createWithClient(ctx, e, fs, action, args, &apiURL, &credential)
	case "list":
		var status, startingAfter string
		var limit int
		fs.StringVar(&status, "status", "", "only charges in this state (pending, submitting, unknown, succeeded, failed, needs_review)")
		fs.IntVar(&limit, "limit", 0, "page size, 1 to 100")
		fs.StringVar(&startingAfter, "starting-after", "", "the last id of the previous page")
		if err := parseToolFlags(fs, e, args, chargeSettings...); err != nil {
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
		method, path = http.MethodGet, "/v1/charges"
		if len(q) > 0 {
			path += "?" + q.Encode()
		}
	case "get", "events", "reconcile", "resolve":
		var r struct{ status, evidence, providerChargeID, failureCode string }
		if action == "resolve" {
			fs.StringVar(&r.status, "status", "", "succeeded, failed or pending (a new attempt with the same provider key)")
			fs.StringVar(&r.evidence, "evidence", "", "what you checked and where (recorded in the charge's events)")
			fs.StringVar(&r.providerChargeID, "provider-charge-id", "", "the provider's charge id (with --status succeeded)")
			fs.StringVar(&r.failureCode, "failure-code", "", "the failure code (with --status failed)")
		}
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			return fmt.Errorf("charge %s: the charge id comes first: chargeflow charge %s ch_… [flags]", action, action)
		}
		id := args[0]
		if err := parseToolFlags(fs, e, args[1:], chargeSettings...); err != nil {
			return err
		}
		method, path = http.MethodGet, "/v1/charges/"+url.PathEscape(id)
		switch action {
		case "events":
			path += "/events"
		case "reconcile":
			method, path = http.MethodPost, "/ops/v1/charges/"+url.PathEscape(id)+"/reconcile"
		case "resolve":
			method, path = http.MethodPost, "/ops/v1/charges/"+url.PathEscape(id)+"/resolve"
			fields := map[string]string{"status": r.status, "evidence": r.evidence}
			if r.providerChargeID != "" {
				fields["provider_charge_id"] = r.providerChargeID
			}
			if r.failureCode != "" {
				fields["failure_code"] = r.failureCode
			}
			var err error
			if body, err = json.Marshal(fields); err != nil {
				return err
			}
		}
	default:
		return usage
	}
	switch {
	case credential == "" && operatorAction:
		return fmt.Errorf("charge %s: no operator token: pass --operator-token or set CHARGEFLOW_OPERATOR_TOKEN (chargeflow operator create)", action)
	case credential == "":
		return errors.New("charge: no API key: pass --api-key or set CHARGEFLOW_API_KEY")
	}
	return callAPI(ctx, e, method, strings.TrimRight(apiURL, "/")+path, credential, body)
}

// chargeSettings are the flags of `chargeflow charge` that come from the
// environment too (CHARGEFLOW_API_URL, CHARGEFLOW_API_KEY,
// CHARGEFLOW_OPERATOR_TOKEN); the others say what one call does.
var chargeSettings = []string{"api-url", "api-key", "operator-token"}

// callAPI makes one call and prints the answer, indented. A problem answer
// goes to stderr and becomes the command's error.
func callAPI(ctx context.Context, e env, method, target, credential string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+credential)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("call the API: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read the API's answer: %w", err)
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, data, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(data)
	}
	if resp.StatusCode >= 300 {
		fmt.Fprintln(e.stderr, strings.TrimSpace(pretty.String()))
		return fmt.Errorf("the API answered %s", resp.Status)
	}
	_, err = fmt.Fprintln(e.stdout, strings.TrimSpace(pretty.String()))
	return err
}

// createWithClient creates a charge or a refund through chargeflow/client:
// the key made once (or given with --key) and kept across every retry
// until a definitive answer, as a merchant's code should (docs/client.md).
// The key is printed to stderr so that a run without an answer can be
// retried with it.
func createWithClient(ctx context.Context, e env, fs *flag.FlagSet, action string, args []string, apiURL, credential *string) error {
	var key, currency, paymentMethod, reason, chargeID string
	var amount int64
	var wait bool
	fs.StringVar(&key, "key", "", "the idempotency key (default: a new one, printed; reuse it to retry)")
	fs.Int64Var(&amount, "amount", 0, "in the currency's minor unit (a refund's default: what is left)")
	if action == "create" {
		fs.StringVar(&currency, "currency", "USD", "ISO 4217 code")
		fs.StringVar(&paymentMethod, "payment-method", "pm_card_visa", "a payment method token")
		fs.BoolVar(&wait, "wait", false, "wait for the charge's outcome (succeeded, failed or needs_review)")
	} else {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			return errors.New("charge refund: the charge id comes first: chargeflow charge refund ch_… [flags]")
		}
		chargeID, args = args[0], args[1:]
		fs.StringVar(&reason, "reason", "", "requested_by_customer, duplicate or fraudulent")
	}
	if err := parseToolFlags(fs, e, args, chargeSettings...); err != nil {
		return err
	}
	if *credential == "" {
		return errors.New("charge: no API key: pass --api-key or set CHARGEFLOW_API_KEY")
	}
	c, err := client.New(*apiURL, *credential)
	if err != nil {
		return err
	}
	key = cmp.Or(key, client.NewIdempotencyKey())
	fmt.Fprintf(e.stderr, "idempotency key: %s\n", key)
	var result any
	if action == "create" {
		charge, err := c.CreateCharge(ctx, client.ChargeParams{Amount: amount, Currency: currency, PaymentMethod: paymentMethod, IdempotencyKey: key})
		if err == nil && wait {
			charge, err = c.WaitForOutcome(ctx, charge.ID)
		}
		result = charge
		if err != nil {
			return fmt.Errorf("charge create: %w", err)
		}
	} else {
		refund, err := c.CreateRefund(ctx, client.RefundParams{Charge: chargeID, Amount: amount, Reason: client.RefundReason(reason), IdempotencyKey: key})
		result = refund
		if err != nil {
			return fmt.Errorf("charge refund: %w", err)
		}
	}
	out, err := json.MarshalIndent(result, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(e.stdout, string(out))
	return err
}
