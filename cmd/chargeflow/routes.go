package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/chargeflow/chargeflow/route"
)

// Provider accounts and tenants' routes (docs/routing.md), through package
// admin as every administrator's change is: each with its admin audit
// record. An account names the environment variables its secrets are read
// from in each process, never a secret; a route is entries as
// route.ParseEntry reads them, the same text the operator page takes.

func accountCommands() []command {
	return []command{
		{name: "add", summary: "add a provider account: a kind, an endpoint and the names of the variables its secrets are read from", run: runAccountAdd},
		{name: "list", summary: "every provider account, enabled or disabled (the variables' names, never their values)", run: runAccountList},
		{name: "disable", args: "NAME", summary: "send no new charge to an account; charges already there are still looked up and settled", run: runAccountDisable},
	}
}

func routeCommands() []command {
	return []command{
		{name: "set", args: "TENANT_ID ENTRY...", summary: "send a tenant's charges through accounts in order, each ENTRY account[:CUR,CUR][:min-max]", run: runRouteSet},
		{name: "show", args: "TENANT_ID", summary: "a tenant's route, in order, or that it has none", run: runRouteShow},
		{name: "clear", args: "TENANT_ID", summary: "remove a tenant's route: its charges go to the processes' own provider again", run: runRouteClear},
	}
}

// accountRow is an account as the commands print it.
type accountRow struct {
	route.Account
	Enabled bool `json:"enabled"`
}

func rowOf(a route.Account) accountRow {
	a.CreatedAt = a.CreatedAt.UTC()
	if a.DisabledAt != nil {
		at := a.DisabledAt.UTC()
		a.DisabledAt = &at
	}
	return accountRow{Account: a, Enabled: a.Enabled()}
}

// variable shows the name of an environment variable, or that there is none.
func variable(name string) string {
	if name == "" {
		return "-"
	}
	return "$" + name
}

// orDash shows s, or that there is nothing.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// accountStatus is "enabled", or "disabled" and since when.
func accountStatus(a route.Account) string {
	if a.DisabledAt == nil {
		return "enabled"
	}
	return "disabled " + a.DisabledAt.Local().Format(time.DateTime)
}

// reads says which variables each process reads for a, and what a
// process without them does.
func reads(a route.Account) string {
	var reads, without []string
	if a.CredentialEnv != "" {
		reads = append(reads, "reads its API key from $"+a.CredentialEnv)
		without = append(without, "without the key does not call it")
	}
	if a.WebhookSecretEnv != "" {
		reads = append(reads, "verifies its notifications (POST /v1/provider_webhooks/"+a.Name+") with the secret in $"+a.WebhookSecretEnv)
		without = append(without, "without the secret refuses its notifications")
	}
	if len(reads) == 0 {
		return "It needs no secret, and its notifications are refused (it has no --webhook-secret-env)."
	}
	them := "it"
	if len(reads) > 1 {
		them = "them"
	}
	return "Each process " + strings.Join(reads, " and ") + ": set " + them + " where the api, worker and reconciler run " +
		"(a process " + strings.Join(without, "; one ") + ")."
}

func runAccountAdd(ctx context.Context, e env, args []string) error {
	var a adminFlags
	var acct route.Account
	var kind string
	fs := newFlagSet("account add", e)
	a.bind(fs)
	fs.StringVar(&acct.Name, "name", "", "the account's name (unique): its charges' provider, and its notifications' path /v1/provider_webhooks/NAME; required")
	fs.StringVar(&kind, "kind", "", "the provider's protocol: fake, stripe or adyen; required")
	fs.StringVar(&acct.Endpoint, "endpoint", "", "the provider's base `URL` (Adyen's with its version: https://checkout-test.adyen.com/v71); required")
	fs.StringVar(&acct.CredentialEnv, "credential-env", "", "the name of the environment `VARIABLE` each process reads the API key from, never the key; required but for fake")
	fs.StringVar(&acct.WebhookSecretEnv, "webhook-secret-env", "", "the name of the `VARIABLE` holding the secret its notifications are verified with (none: they are refused)")
	fs.StringVar(&acct.MerchantAccount, "merchant-account", "", "Adyen's merchant account; required for adyen")
	s, pool, _, err := a.open(ctx, fs, e, args, func() error {
		if acct.Name == "" || kind == "" || acct.Endpoint == "" {
			return usageErrorf("account add: --name, --kind and --endpoint are required")
		}
		acct.Kind = route.Kind(kind)
		// Refused before the database is opened; the message never
		// repeats a value given where a variable's name belongs.
		return adminError("account add", acct.Check())
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	added, err := s.AddAccount(ctx, a.actor, acct)
	if err != nil {
		return adminError("account add", err)
	}
	asJSON, err := a.output.json(e)
	if err != nil {
		return err
	}
	if asJSON {
		// stdout is what a program reads; the reminder is for the person.
		fmt.Fprintln(e.stderr, reads(added))
	}
	return a.show(e, rowOf(added), func(w io.Writer) {
		fmt.Fprintf(w, "ACCOUNT\t%s (%s)\nENDPOINT\t%s\nAPI KEY FROM\t%s\nWEBHOOK SECRET FROM\t%s\n", added.Name, added.Kind, added.Endpoint,
			variable(added.CredentialEnv), variable(added.WebhookSecretEnv))
		if added.MerchantAccount != "" {
			fmt.Fprintf(w, "MERCHANT ACCOUNT\t%s\n", added.MerchantAccount)
		}
		fmt.Fprintf(w, "\n%s\nNo charge goes to it until a tenant's route names it: chargeflow route set TENANT_ID %s\n", reads(added), added.Name)
	})
}

func runAccountList(ctx context.Context, e env, args []string) error {
	var a adminFlags
	fs := newFlagSet("account list", e)
	a.bind(fs)
	_, pool, _, err := a.open(ctx, fs, e, args, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	accounts, err := route.Accounts(ctx, pool)
	if err != nil {
		return err
	}
	rows := make([]accountRow, 0, len(accounts))
	for _, acct := range accounts {
		rows = append(rows, rowOf(acct))
	}
	return a.show(e, map[string]any{"data": rows}, func(w io.Writer) {
		fmt.Fprintln(w, "NAME\tKIND\tENDPOINT\tKEY FROM\tWEBHOOK SECRET FROM\tMERCHANT ACCOUNT\tSTATUS\tCREATED")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Kind, r.Endpoint, variable(r.CredentialEnv), variable(r.WebhookSecretEnv),
				orDash(r.MerchantAccount), accountStatus(r.Account), r.CreatedAt.Local().Format(time.DateTime))
		}
		if len(rows) == 0 {
			fmt.Fprintln(w, "(none: every charge goes to the processes' own provider)")
		}
	})
}

func runAccountDisable(ctx context.Context, e env, args []string) error {
	var a adminFlags
	fs := newFlagSet("account disable", e)
	a.bind(fs)
	s, pool, pos, err := a.open(ctx, fs, e, args, nil, "NAME")
	if err != nil {
		return err
	}
	defer pool.Close()
	acct, err := s.DisableAccount(ctx, a.actor, pos[0])
	if err != nil {
		return adminError("account disable", err)
	}
	return a.show(e, rowOf(acct), func(w io.Writer) {
		fmt.Fprintf(w, "Account %s is %s: no new charge goes to it (each process sees it within %s); "+
			"charges already there are still looked up, settled and refunded through it.\n", acct.Name, accountStatus(acct), route.DefaultTTL)
	})
}

// routeView is a tenant's route as the route commands print it.
type routeView struct {
	TenantID string        `json:"tenant_id"`
	Entries  []route.Entry `json:"entries"`
}

// showRoute prints a tenant's route, each entry with what it takes and
// whether its account takes charges now.
func (a *adminFlags) showRoute(ctx context.Context, e env, db route.DB, tenantID string, entries []route.Entry, note string) error {
	accounts, err := route.Accounts(ctx, db)
	if err != nil {
		return err
	}
	disabled := map[string]bool{}
	for _, acct := range accounts {
		disabled[acct.Name] = !acct.Enabled()
	}
	if entries == nil {
		entries = []route.Entry{}
	}
	return a.show(e, routeView{TenantID: tenantID, Entries: entries}, func(w io.Writer) {
		if len(entries) == 0 {
			fmt.Fprintf(w, "Tenant %s has no route: its charges go to the processes' own provider.\n", tenantID)
		} else {
			fmt.Fprintf(w, "Tenant %s sends each charge to the first of these that takes it:\n\n", tenantID)
			fmt.Fprintln(w, "#\tENTRY\tTAKES")
			for i, en := range entries {
				takes := en.Describe()
				if disabled[en.Account] {
					takes += " (account disabled: passed over)"
				}
				fmt.Fprintf(w, "%d\t%s\t%s\n", i+1, en, takes)
			}
		}
		if note != "" {
			fmt.Fprintf(w, "\n%s\n", note)
		}
	})
}

func runRouteSet(ctx context.Context, e env, args []string) error {
	var a adminFlags
	var entries []route.Entry
	fs := newFlagSet("route set", e)
	a.bind(fs)
	s, pool, pos, err := a.open(ctx, fs, e, args, func() error {
		if fs.NArg() < 2 {
			return usageErrorf("route set: no ENTRY: a route names at least one account; " +
				"`chargeflow route clear TENANT_ID` sends the tenant's charges to the processes' own provider again")
		}
		var err error
		entries, err = route.ParseEntries(strings.Join(fs.Args()[1:], " "))
		if err != nil {
			return usageErrorf("route set: %v (run 'chargeflow route set -h')", err)
		}
		return nil
	}, "TENANT_ID", "ENTRY...")
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := s.SetRoute(ctx, a.actor, pos[0], entries); err != nil {
		return adminError("route set", err)
	}
	return a.showRoute(ctx, e, pool, pos[0], entries, fmt.Sprintf("New charges follow it within %s.", route.DefaultTTL))
}

func runRouteShow(ctx context.Context, e env, args []string) error {
	var a adminFlags
	fs := newFlagSet("route show", e)
	a.bind(fs)
	_, pool, pos, err := a.open(ctx, fs, e, args, nil, "TENANT_ID")
	if err != nil {
		return err
	}
	defer pool.Close()
	entries, err := route.Route(ctx, pool, pos[0])
	if err != nil {
		return adminError("route show", err)
	}
	return a.showRoute(ctx, e, pool, pos[0], entries, "")
}

func runRouteClear(ctx context.Context, e env, args []string) error {
	var a adminFlags
	fs := newFlagSet("route clear", e)
	a.bind(fs)
	s, pool, pos, err := a.open(ctx, fs, e, args, nil, "TENANT_ID")
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := s.SetRoute(ctx, a.actor, pos[0], nil); err != nil {
		return adminError("route clear", err)
	}
	return a.showRoute(ctx, e, pool, pos[0], nil, fmt.Sprintf("New charges go there within %s.", route.DefaultTTL))
}
