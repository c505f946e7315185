//go:build lab

package main

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/chargeflow/chargeflow/lab/fakepsp"
)

// fakepspFlags configure the bundled fake provider.
type fakepspFlags struct {
	addr     string
	noDedupe bool
	faults   string
	ledger   string

	// holdWindow is how long the provider holds an authorization before
	// it releases it itself (fakepsp.Config.HoldWindow); bound by
	// bindHoldWindow, or set by `chargeflow all`.
	holdWindow time.Duration

	// multipleCaptures lets an authorization be captured in parts
	// (fakepsp.Config.MultipleCaptures), the negative control's provider.
	multipleCaptures bool

	// protocol is bound by `chargeflow fakepsp` alone: `chargeflow all`
	// sets it from --psp, so that its provider speaks what its roles do.
	protocol string

	// webhookURL and webhookSecret, bound by bindWebhook, make the
	// provider send notifications (docs/notifications.md).
	webhookURL    string
	webhookSecret string
}

func (f *fakepspFlags) bind(fs *flag.FlagSet, e env, addrFlag string) {
	fs.StringVar(&f.addr, addrFlag, "127.0.0.1:9090", "address the fake provider listens on")
	fs.BoolVar(&f.noDedupe, "no-dedupe", false, "turn the provider's own idempotency-key de-duplication off: every POST applies a new charge")
	fs.StringVar(&f.faults, "faults", "", `fault schedule at start, e.g. {"seed": 1, "rules": [{"on": "charge", "fault": "apply_then_timeout", "p": 0.3, "ms": 2000}]}`)
	fs.StringVar(&f.ledger, "ledger", filepath.Join(cmp.Or(e.getenv("CHARGEFLOW_DATA"), ".data"), "fakepsp-ledger.jsonl"),
		"the durable ledger file (created if missing; replayed on start); the default is under CHARGEFLOW_DATA when that is set")
}

// bindHoldWindow binds --hold-window and --multiple-captures, bound by
// `chargeflow fakepsp` alone: `chargeflow all` sets the window from its own
// --hold-window, the one its roles declare the provider holds an
// authorization for, and never captures in parts.
func (f *fakepspFlags) bindHoldWindow(fs *flag.FlagSet) {
	fs.DurationVar(&f.holdWindow, "hold-window", fakepsp.DefaultHoldWindow,
		"how long the provider holds an authorization (a charge to capture later) before it releases it itself: a capture after that is refused")
	fs.BoolVar(&f.multipleCaptures, "multiple-captures", false,
		"let an authorization be captured again, in parts within what was authorized, as Adyen's multiple partial captures (a laboratory mode: with --no-dedupe a capture sent twice is captured twice)")
}

// bindProtocol binds --protocol, the wire protocol the provider serves.
func (f *fakepspFlags) bindProtocol(fs *flag.FlagSet) {
	fs.StringVar(&f.protocol, "protocol", fakepsp.ProtocolFake,
		`wire protocol: "fake" (chargeflow's own, docs/provider.md), "stripe" (Stripe's PaymentIntents, for stripe-go) or "adyen" (Adyen's Checkout v71 payments and refunds); same ledger, faults and admin endpoints`)
}

// bindWebhook binds --webhook-url and --webhook-secret. The secret has no
// default, which -h would print; it comes from the environment
// (CHARGEFLOW_WEBHOOK_SECRET or PSP_WEBHOOK_SECRET) after parsing. Under
// --protocol adyen it is the HMAC key in hex, as Adyen gives it.
func (f *fakepspFlags) bindWebhook(fs *flag.FlagSet) {
	fs.StringVar(&f.webhookURL, "webhook-url", "",
		"send a signed notification of every charge and refund applied to this URL (docs/notifications.md); none when empty")
	fs.StringVar(&f.webhookSecret, "webhook-secret", "",
		"the secret notifications are signed with, required with --webhook-url; under --protocol adyen the HMAC key in hex, as Adyen gives it (set it from the environment: a flag shows in ps)")
}

// newFakePSP opens the fake provider's ledger and applies the flags.
func newFakePSP(f fakepspFlags, logger *slog.Logger) (*fakepsp.Server, error) {
	switch f.protocol {
	case "", fakepsp.ProtocolFake, fakepsp.ProtocolStripe, fakepsp.ProtocolAdyen:
	default:
		return nil, fmt.Errorf("--protocol is %q, want %q, %q or %q", f.protocol, fakepsp.ProtocolFake, fakepsp.ProtocolStripe, fakepsp.ProtocolAdyen)
	}
	if f.webhookURL != "" && f.webhookSecret == "" {
		return nil, fmt.Errorf("--webhook-url needs a secret to sign with: PSP_WEBHOOK_SECRET, CHARGEFLOW_WEBHOOK_SECRET or --webhook-secret")
	}
	if f.webhookURL != "" && f.protocol == fakepsp.ProtocolAdyen {
		if _, err := hex.DecodeString(f.webhookSecret); err != nil {
			return nil, errors.New("--protocol adyen signs notifications with an HMAC key in hex, as Adyen gives it: the webhook secret (PSP_WEBHOOK_SECRET, CHARGEFLOW_WEBHOOK_SECRET or --webhook-secret) is not hex")
		}
	}
	cfg := fakepsp.Config{LedgerPath: f.ledger, Protocol: f.protocol, Logger: logger, HoldWindow: f.holdWindow, MultipleCaptures: f.multipleCaptures,
		Notifications: fakepsp.Notifications{URL: f.webhookURL, Secret: f.webhookSecret}}
	if f.noDedupe {
		dedupe := false
		cfg.Dedupe = &dedupe
	}
	if f.faults != "" {
		schedule, err := fakepsp.ParseSchedule([]byte(f.faults))
		if err != nil {
			return nil, fmt.Errorf("--faults: %w", err)
		}
		cfg.Faults = schedule
	}
	if err := os.MkdirAll(filepath.Dir(f.ledger), 0o755); err != nil {
		return nil, fmt.Errorf("ledger folder: %w", err)
	}
	return fakepsp.New(cfg)
}

// serveFakePSP serves the fake provider until ctx is done. Closing it first
// releases the connections its faults hold open.
func serveFakePSP(ctx context.Context, server *fakepsp.Server, addr string, logger *slog.Logger, ready func(net.Addr)) error {
	err := serveHTTP(ctx, addr, server.Handler(), logger, serveOptions{
		ready:            ready,
		holdsConnections: true,
		beforeShutdown:   func() { _ = server.Close() },
	})
	if closeErr := server.Close(); err == nil {
		err = closeErr
	}
	return err
}

// runFakePSP runs the bundled fake provider until interrupted.
func runFakePSP(ctx context.Context, e env, args []string) error {
	var c common
	var f fakepspFlags
	fs := newFlagSet("fakepsp", e)
	c.bindLogLevel(fs)
	f.bind(fs, e, "addr")
	f.bindProtocol(fs)
	f.bindHoldWindow(fs)
	f.bindWebhook(fs)
	if err := parseFlags(fs, e, args); err != nil {
		return err
	}
	logger, err := c.logger(e)
	if err != nil {
		return err
	}
	logger = logger.With("role", "fakepsp")
	server, err := newFakePSP(f, logger)
	if err != nil {
		return err
	}
	return serveFakePSP(ctx, server, f.addr, logger, nil)
}
