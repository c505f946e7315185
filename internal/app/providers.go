package app

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/chargeflow/chargeflow/api"
	"github.com/chargeflow/chargeflow/psp"
	pspadyen "github.com/chargeflow/chargeflow/psp/adyen"
	pspstripe "github.com/chargeflow/chargeflow/psp/stripe"
	"github.com/chargeflow/chargeflow/route"
)

// Providers is the registry of every provider a process can call
// (psp.Registry): its own, which Options.ProviderKind picks, and each
// provider account of the database (docs/routing.md), built from the
// account's kind and endpoint with the credentials the environment
// variables it names hold in this process. An account whose variables are
// unset here is not callable here (psp.ErrNoSuchProvider, saying which).
// An account is built on first use and again when its settings change.
type Providers struct {
	own    psp.Provider
	routes *route.Cache
	o      Options

	mu    sync.Mutex
	built map[string]built
}

type built struct {
	account  route.Account
	provider psp.Provider
	err      error
}

// Providers makes the registry of o's processes on routes' accounts.
func (o Options) Providers(routes *route.Cache) (*Providers, error) {
	own, err := o.ProviderClient()
	if err != nil {
		return nil, err
	}
	return &Providers{own: own, routes: routes, o: o, built: map[string]built{}}, nil
}

// Own is the processes' own provider.
func (p *Providers) Own() psp.Provider { return p.own }

// Provider is the adapter of the provider called name.
func (p *Providers) Provider(ctx context.Context, name string) (psp.Provider, error) {
	if name == p.own.Capabilities().Name {
		return p.own, nil
	}
	table, err := p.routes.Table(ctx)
	if err != nil {
		return nil, err
	}
	a, ok := table.Account(name)
	if !ok {
		return nil, fmt.Errorf("%w: no provider account %q", psp.ErrNoSuchProvider, name)
	}
	b := p.build(a)
	return b.provider, b.err
}

// Names lists the processes' own provider and every account callable here.
func (p *Providers) Names(ctx context.Context) ([]string, error) {
	names := []string{p.own.Capabilities().Name}
	table, err := p.routes.Table(ctx)
	if err != nil {
		return nil, err
	}
	for _, a := range table.Accounts() {
		if b := p.build(a); b.err == nil {
			names = append(names, a.Name)
		}
	}
	return names, nil
}

// build is a's adapter, made again only when a's settings changed.
func (p *Providers) build(a route.Account) built {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.built[a.Name]
	if ok && sameSettings(b.account, a) {
		return b
	}
	b = built{account: a}
	b.provider, b.err = p.o.accountProvider(a)
	p.built[a.Name] = b
	return b
}

// sameSettings reports whether an adapter made for a serves b: everything
// but the dates.
func sameSettings(a, b route.Account) bool {
	a.CreatedAt, a.DisabledAt, b.CreatedAt, b.DisabledAt = time.Time{}, nil, time.Time{}, nil
	return a == b
}

// getenv is o.Getenv, or nothing set.
func (o Options) getenv(name string) string {
	if o.Getenv == nil || name == "" {
		return ""
	}
	return o.Getenv(name)
}

// accountProvider builds the adapter of account a with the processes'
// call timeout and telemetry, and the fake's declared capabilities for a
// fake account.
func (o Options) accountProvider(a route.Account) (psp.Provider, error) {
	key := o.getenv(a.CredentialEnv)
	if a.CredentialEnv != "" && key == "" {
		return nil, fmt.Errorf("%w: provider account %q reads its API key from %s, which is not set in this process",
			psp.ErrNoSuchProvider, a.Name, a.CredentialEnv)
	}
	timeout := o.Provider.Timeout
	switch a.Kind {
	case route.KindFake:
		caps := o.Provider.Capabilities
		caps.Name = a.Name
		return psp.NewClient(psp.Config{BaseURL: a.Endpoint, Timeout: timeout, Capabilities: caps, HTTPClient: o.Provider.HTTPClient,
			TracerProvider: o.TracerProvider, MeterProvider: o.MeterProvider}), nil
	case route.KindStripe:
		return pspstripe.New(pspstripe.Config{Name: a.Name, BaseURL: a.Endpoint, APIKey: key, Timeout: timeout,
			HTTPClient: o.Provider.HTTPClient, ApplyDelay: o.Reconciler.Provider.MaxApplyDelay, ClockSkew: o.StripeClockSkew,
			TracerProvider: o.TracerProvider, MeterProvider: o.MeterProvider}), nil
	case route.KindAdyen:
		return pspadyen.New(pspadyen.Config{Name: a.Name, BaseURL: a.Endpoint, APIKey: key, MerchantAccount: a.MerchantAccount,
			Timeout: timeout, HTTPClient: o.Provider.HTTPClient, TracerProvider: o.TracerProvider, MeterProvider: o.MeterProvider}), nil
	}
	return nil, fmt.Errorf("%w: provider account %q is of kind %q, which this build cannot call", psp.ErrNoSuchProvider, a.Name, a.Kind)
}

// notificationSources finds the source of an account's notifications:
// its kind's parser with the secret its variable holds here. An account
// without a secret here receives none (404). The processes' own provider,
// when it is Adyen, is found here too, under "adyen".
func (p *Providers) notificationSources(ctx context.Context, name string) (api.NotificationSource, bool) {
	if p.o.ProviderKind == ProviderAdyen && name == ProviderAdyen && p.o.ProviderWebhookSecret != "" {
		return adyenSource(p.own.Capabilities().Name, p.o.ProviderWebhookSecret), true
	}
	table, err := p.routes.Table(ctx)
	if err != nil {
		return api.NotificationSource{}, false
	}
	a, ok := table.Account(name)
	if !ok {
		return api.NotificationSource{}, false
	}
	secret := p.o.getenv(a.WebhookSecretEnv)
	if secret == "" {
		return api.NotificationSource{}, false
	}
	src := api.NotificationSource{Provider: a.Name}
	switch a.Kind {
	case route.KindFake:
		src.Parse = func(h http.Header, body []byte, now time.Time) ([]psp.Notification, error) {
			n, err := psp.ParseNotification(secret, h, body, now, 0)
			return []psp.Notification{n}, err
		}
	case route.KindStripe:
		src.Parse = func(h http.Header, body []byte, now time.Time) ([]psp.Notification, error) {
			n, err := pspstripe.ParseNotification(secret, h, body, now, 0)
			return []psp.Notification{n}, err
		}
	case route.KindAdyen:
		return adyenSource(a.Name, secret), true
	default:
		return api.NotificationSource{}, false
	}
	return src, true
}

// adyenSource reads Adyen's notifications for the provider called name,
// verified with the HMAC key hmacKeyHex, and answers them as Adyen expects.
func adyenSource(name, hmacKeyHex string) api.NotificationSource {
	return api.NotificationSource{Provider: name, Ack: pspadyen.NotificationAccepted,
		Parse: func(_ http.Header, body []byte, _ time.Time) ([]psp.Notification, error) {
			return pspadyen.ParseNotifications(hmacKeyHex, body)
		}}
}
