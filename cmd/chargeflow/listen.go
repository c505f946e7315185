package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/chargeflow/chargeflow/delivery"
	"github.com/chargeflow/chargeflow/event"
	retry "github.com/chargeflow/chargeflow/internal/backoff"
	"github.com/chargeflow/chargeflow/webhook"
)

// runListen forwards the tenant's events to a URL on this machine, as
// webhooks: a merchant developing against chargeflow has no public URL for
// an endpoint. It reads the events the API lists (GET /v1/events, from the
// newest at its start on) and sends each with delivery.Sender, the worker's
// own: signed the same way, with the same headers, body and success rule,
// retried on the same backoff. One line per event says what happened.
func runListen(ctx context.Context, e env, args []string) error {
	var a apiFlags
	var forwardTo, secret, types string
	var interval, retryBase, retryCap time.Duration
	var attempts int
	fs := newFlagSet("listen", e)
	a.bind(fs, false)
	fs.StringVar(&forwardTo, "forward-to", "", "the URL to POST each event to, e.g. http://localhost:3000/webhooks; required")
	fs.StringVar(&secret, "secret", "", "the whsec_ secret to sign with, so your receiver keeps its configuration (default: a new one, printed; set it from the environment)")
	fs.StringVar(&types, "events", "", "only these event types, comma-separated (default: every type)")
	fs.DurationVar(&interval, "interval", time.Second, "how often to ask the API for new events")
	fs.IntVar(&attempts, "max-attempts", 5, "attempts per event before giving it up")
	fs.DurationVar(&retryBase, "retry-base", time.Second, "the wait before the second attempt, doubling after it")
	fs.DurationVar(&retryCap, "retry-cap", 30*time.Second, "the longest wait between attempts")
	if err := parseToolFlags(fs, e, args, append(slices.Clone(chargeSettings), "secret")...); err != nil {
		return err
	}
	if _, err := positional(fs); err != nil {
		return err
	}
	if u, err := url.Parse(forwardTo); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErrorf("listen: --forward-to %q: want an http:// or https:// URL", forwardTo)
	}
	var wanted []string
	for _, t := range strings.Split(types, ",") {
		if t = strings.TrimSpace(t); t == "" {
			continue
		}
		if !event.ValidType(t) {
			return usageErrorf("listen: --events: %q is not an event type (%s)", t, strings.Join(event.Types, ", "))
		}
		wanted = append(wanted, t)
	}
	if secret == "" {
		secret = webhook.NewSecret()
	} else if _, err := webhook.Sign(secret, "evt_check", 0, nil); err != nil {
		return usageErrorf("listen: --secret is not a whsec_ secret")
	}
	if a.credential == "" {
		return usageErrorf("listen: no API key: set CHARGEFLOW_API_KEY (chargeflow tenant create)")
	}

	// From the newest event there is now: what happens while listening.
	cursor, err := newestEvent(ctx, a)
	if err != nil {
		return err
	}
	// The laptop's own receiver: any address and port, as --forward-to says.
	sender := delivery.NewSender(webhook.Policy{AllowPrivate: true}, delivery.DefaultTimeout, time.Now)
	fmt.Fprintf(e.stdout, "Forwarding the events of this tenant to %s, signed with %s (the secret your receiver verifies with). Ctrl-C stops.\n",
		forwardTo, secret)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		events, err := eventsAfter(ctx, a, cursor)
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(e.stdout, "%s  could not read the events: %v\n", time.Now().Format("15:04:05"), err)
		}
		for _, ev := range events {
			cursor = ev.ID
			if len(wanted) > 0 && !slices.Contains(wanted, ev.Type) {
				continue
			}
			forward(ctx, e, sender, forwardTo, secret, ev, attempts, retryBase, retryCap)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// listedEvent is an event as GET /v1/events lists it: its id and type, and
// the body a webhook carries.
type listedEvent struct {
	ID, Type string
	Body     json.RawMessage
}

// forward sends one event until it is delivered, attempts run out or ctx
// ends, and prints a line for each attempt.
func forward(ctx context.Context, e env, sender *delivery.Sender, to, secret string, ev listedEvent, attempts int, base, ceiling time.Duration) {
	for attempt := 1; ctx.Err() == nil; attempt++ {
		o, _ := sender.Send(ctx, to, secret, ev.ID, ev.Body)
		line := fmt.Sprintf("%s  %-26s %s  → ", time.Now().Format("15:04:05"), ev.Type, ev.ID)
		switch {
		case o.Delivered:
			fmt.Fprintf(e.stdout, "%s%d (%d ms)\n", line, o.Status, o.Duration.Milliseconds())
			return
		case o.Status != 0:
			line += fmt.Sprintf("%d", o.Status)
		default:
			line += o.Error
		}
		if attempt >= attempts {
			fmt.Fprintf(e.stdout, "%s; given up after %d attempts\n", line, attempt)
			return
		}
		wait := retry.Delay(attempt, base, ceiling)
		fmt.Fprintf(e.stdout, "%s; again in %s\n", line, wait.Round(100*time.Millisecond))
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// newestEvent is the id of the tenant's newest event, "" when it has none.
func newestEvent(ctx context.Context, a apiFlags) (string, error) {
	page, _, err := eventPage(ctx, a, 1, "")
	if err != nil || len(page) == 0 {
		return "", err
	}
	return page[0].ID, nil
}

// eventsAfter is every event newer than cursor, oldest first.
func eventsAfter(ctx context.Context, a apiFlags, cursor string) ([]listedEvent, error) {
	var newer []listedEvent
	startingAfter := ""
	for {
		page, more, err := eventPage(ctx, a, 100, startingAfter)
		if err != nil {
			return nil, err
		}
		for _, ev := range page {
			if cursor != "" && ev.ID <= cursor {
				slices.Reverse(newer)
				return newer, nil
			}
			newer = append(newer, ev)
		}
		if !more || len(page) == 0 {
			slices.Reverse(newer)
			return newer, nil
		}
		startingAfter = page[len(page)-1].ID
	}
}

// eventPage is one page of GET /v1/events, newest first.
func eventPage(ctx context.Context, a apiFlags, limit int, startingAfter string) ([]listedEvent, bool, error) {
	q := url.Values{"limit": {fmt.Sprint(limit)}}
	if startingAfter != "" {
		q.Set("starting_after", startingAfter)
	}
	data, _, err := apiRequest(ctx, a.apiURL, a.credential, http.MethodGet, "/v1/events?"+q.Encode(), nil)
	if err != nil {
		return nil, false, err
	}
	var page struct {
		Data    []json.RawMessage `json:"data"`
		HasMore bool              `json:"has_more"`
	}
	if err := json.Unmarshal(data, &page); err != nil {
		return nil, false, fmt.Errorf("the API's events: %w", err)
	}
	out := make([]listedEvent, 0, len(page.Data))
	for _, raw := range page.Data {
		var head struct{ ID, Type string }
		if err := json.Unmarshal(raw, &head); err != nil {
			return nil, false, fmt.Errorf("the API's events: %w", err)
		}
		out = append(out, listedEvent{ID: head.ID, Type: head.Type, Body: raw})
	}
	return out, page.HasMore, nil
}
