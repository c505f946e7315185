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
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bojanz/currency"
)

// outputFlag is --output: table, json, or auto (a table on a terminal, the
// API's own JSON otherwise, so a pipe gets what a program reads).
type outputFlag struct{ format string }

func (o *outputFlag) bind(fs *flag.FlagSet) {
	fs.StringVar(&o.format, "output", "auto", "table, json (the API's own JSON), or auto: a table when stdout is a terminal, JSON otherwise")
}

// json reports whether the command prints JSON.
func (o outputFlag) json(e env) (bool, error) {
	switch o.format {
	case "json":
		return true, nil
	case "table":
		return false, nil
	case "auto", "":
		return !e.stdoutTerminal, nil
	}
	return false, usageErrorf("--output %q: want table, json or auto", o.format)
}

// resourceKind says how a table shows an answer.
type resourceKind int

const (
	kindCharge resourceKind = iota
	kindChargeList
	kindRefund
	kindOperation
	kindAuditTrail
)

// apiRequest makes one call to the API and returns the answer's body. An
// answer that is not a 2xx is an error naming its status, problem code and
// detail, with the exit code its status means, and the answer as problem;
// no answer at all is unavailable.
func apiRequest(ctx context.Context, baseURL, credential, method, path string, body any) (data, problem []byte, err error) {
	encoded, err := encodeBody(body)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(baseURL, "/")+path, bytes.NewReader(encoded))
	if err != nil {
		return nil, nil, usageErrorf("--api-url %q: %v", baseURL, err)
	}
	req.Header.Set("Authorization", "Bearer "+credential)
	if encoded != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, withExit(exitUnavailable, fmt.Errorf("call the API: %w", err))
	}
	defer resp.Body.Close()
	data, err = io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, nil, withExit(exitUnavailable, fmt.Errorf("read the API's answer: %w", err))
	}
	if resp.StatusCode < 300 {
		return data, nil, nil
	}
	var p struct{ Code, Detail, Field string }
	msg := resp.Status
	if json.Unmarshal(data, &p) == nil && p.Code != "" {
		msg = strconv.Itoa(resp.StatusCode) + " " + p.Code
		if p.Detail != "" {
			msg += ": " + p.Detail
		}
		if p.Field != "" {
			msg += " (field " + p.Field + ")"
		}
	}
	return nil, data, withExit(statusExit(resp.StatusCode), errors.New("the API answered "+msg))
}

// printResource prints an answer: the API's JSON, indented, or a table.
func printResource(e env, o outputFlag, kind resourceKind, data []byte) error {
	asJSON, err := o.json(e)
	if err != nil {
		return err
	}
	if asJSON {
		var pretty bytes.Buffer
		if json.Indent(&pretty, data, "", "  ") != nil {
			pretty.Reset()
			pretty.Write(data)
		}
		_, err := fmt.Fprintln(e.stdout, strings.TrimSpace(pretty.String()))
		return err
	}
	var v map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("the API's answer is not a JSON object: %w", err)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	switch kind {
	case kindCharge:
		printFields(tw, v, chargeFields)
	case kindRefund:
		printFields(tw, v, refundFields)
	case kindOperation:
		printFields(tw, v, operationFields)
	case kindChargeList:
		rows := list(v["data"])
		fmt.Fprintln(tw, "ID\tSTATUS\tAMOUNT\tREFUNDED\tCREATED")
		for _, c := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", str(c["id"]), str(c["status"]), money(c, "amount"), money(c, "amount_refunded"), when(c["created_at"]))
		}
		if len(rows) == 0 {
			fmt.Fprintln(tw, "(none)")
		}
		if more, _ := v["has_more"].(bool); more && len(rows) > 0 {
			fmt.Fprintf(tw, "\nmore: --starting-after %s\n", str(rows[len(rows)-1]["id"]))
		}
	case kindAuditTrail:
		fmt.Fprintln(tw, "AT\tMOVE\tACTOR\tREASON\tATTEMPT\tEVIDENCE")
		for _, ev := range list(v["data"]) {
			move := cmp.Or(str(ev["from"]), "·") + " → " + str(ev["to"])
			if action := str(ev["action"]); action != "" {
				move = action + " (" + str(ev["to"]) + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", when(ev["created_at"]), move, str(ev["actor"]), str(ev["reason"]), str(ev["attempt"]), str(ev["evidence"]))
		}
	}
	return tw.Flush()
}

// A field of a table that shows one resource: its label and how to show
// it.
type field struct {
	label string
	show  func(map[string]any) string
}

func member(name string) func(map[string]any) string {
	return func(v map[string]any) string { return str(v[name]) }
}

var chargeFields = []field{
	{"ID", member("id")},
	{"STATUS", member("status")},
	{"AMOUNT", func(v map[string]any) string { return money(v, "amount") }},
	{"REFUNDED", func(v map[string]any) string { return money(v, "amount_refunded") }},
	{"CAPTURE", func(v map[string]any) string { return ifLater(v, "later") }},
	{"CAPTURED", func(v map[string]any) string { return ifLater(v, money(v, "amount_captured")) }},
	{"PAYMENT METHOD", member("payment_method")},
	{"DESCRIPTION", member("description")},
	{"PROVIDER CHARGE", member("provider_charge_id")},
	{"FAILURE", member("failure_code")},
	{"REVIEW", member("review_reason")},
	{"ATTEMPTS", member("attempts")},
	{"CREATED", func(v map[string]any) string { return when(v["created_at"]) }},
	{"UPDATED", func(v map[string]any) string { return when(v["updated_at"]) }},
}

var refundFields = []field{
	{"ID", member("id")},
	{"STATUS", member("status")},
	{"AMOUNT", func(v map[string]any) string { return money(v, "amount") }},
	{"CHARGE", member("charge")},
	{"REASON", member("reason")},
	{"PROVIDER REFUND", member("provider_refund_id")},
	{"FAILURE", member("failure_code")},
	{"CREATED", func(v map[string]any) string { return when(v["created_at"]) }},
}

// operationFields show a capture or a cancel (KIND says which).
var operationFields = []field{
	{"ID", member("id")},
	{"KIND", member("object")},
	{"STATUS", member("status")},
	{"AMOUNT", func(v map[string]any) string { return money(v, "amount") }},
	{"CHARGE", member("charge")},
	{"FAILURE", member("failure_code")},
	{"REVIEW", member("review_reason")},
	{"ATTEMPTS", member("attempts")},
	{"CREATED", func(v map[string]any) string { return when(v["created_at"]) }},
}

// ifLater is s for a charge created to be captured later ("capture":
// false), and nothing for one captured at once, whose amount is what it
// captures.
func ifLater(v map[string]any, s string) string {
	if capture, ok := v["capture"].(bool); ok && !capture {
		return s
	}
	return ""
}

// printFields prints one resource as label/value lines, leaving out what
// it does not have.
func printFields(w io.Writer, v map[string]any, fields []field) {
	for _, f := range fields {
		if s := f.show(v); s != "" {
			fmt.Fprintf(w, "%s\t%s\n", f.label, s)
		}
	}
	if md, ok := v["metadata"].(map[string]any); ok {
		for k, val := range md {
			fmt.Fprintf(w, "METADATA %s\t%s\n", k, str(val))
		}
	}
}

func list(v any) []map[string]any {
	items, _ := v.([]any)
	out := make([]map[string]any, 0, len(items))
	for _, item := range items {
		if m, ok := item.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// str shows a JSON value; null is empty.
func str(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	}
	return fmt.Sprint(v)
}

// money shows v[name] in the major unit of v's currency: 1000 USD is
// "10.00 USD".
func money(v map[string]any, name string) string {
	n, ok := v[name].(json.Number)
	if !ok {
		return ""
	}
	minor, err := n.Int64()
	code := str(v["currency"])
	if err != nil {
		return n.String()
	}
	a, err := currency.NewAmountFromInt64(minor, code)
	if err != nil {
		return n.String() + " " + code
	}
	return a.Number() + " " + code
}

// when shows an RFC 3339 time in the local zone, to the second.
func when(v any) string {
	t, err := time.Parse(time.RFC3339Nano, str(v))
	if err != nil {
		return str(v)
	}
	return t.Local().Format("2006-01-02 15:04:05")
}
