package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/chargeflow/chargeflow/admin"
	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/migrations"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/route"
	"github.com/chargeflow/chargeflow/tenant"
)

// The administrator's commands work on the database directly (whoever has
// DATABASE_URL is trusted with every tenant); each change goes through
// package admin, which writes its audit record in the same transaction.
func tenantCommands() []command {
	return []command{
		{name: "create", summary: "create a tenant and its first API key (shown once)", run: runTenantCreate},
		{name: "list", summary: "every tenant, with how many API keys work now", run: runTenantList},
		{name: "keys", args: "TENANT_ID", summary: "a tenant's API keys: ids, when made, when they stop working (never the keys)", run: runTenantKeys},
		{name: "rotate-key", args: "TENANT_ID", summary: "give a tenant a new API key (shown once); its other keys keep working for --overlap", run: runTenantRotateKey},
		{name: "revoke-key", args: "TENANT_ID KEY_ID", summary: "make one of a tenant's API keys stop working now", run: runTenantRevokeKey},
	}
}

func operatorCommands() []command {
	return []command{
		{name: "create", summary: "create an operator and its token for /ops/ (shown once)", run: runOperatorCreate},
		{name: "list", summary: "every operator, active or revoked", run: runOperatorList},
		{name: "revoke", args: "NAME", summary: "end an operator: its token and its page sessions stop working at once", run: runOperatorRevoke},
	}
}

// adminFlags are what every administrator's command reads: the database,
// who is acting, and the output format.
type adminFlags struct {
	c      common
	actor  string
	output outputFlag
}

func (a *adminFlags) bind(fs *flag.FlagSet) {
	a.c.bind(fs)
	fs.StringVar(&a.actor, "actor", "", "who is acting, for the admin audit (default: $USER)")
	a.output.bind(fs)
}

// open parses the flags, checks the positional arguments and the required
// flags (check, which may be nil) and opens the database; close the pool
// when done.
func (a *adminFlags) open(ctx context.Context, fs *flag.FlagSet, e env, args []string, check func() error, names ...string) (*admin.Service, *pgxpool.Pool, []string, error) {
	if err := parseToolFlags(fs, e, args, "database-url", "log-level"); err != nil {
		return nil, nil, nil, err
	}
	pos, err := positional(fs, names...)
	if err != nil {
		return nil, nil, nil, err
	}
	if check != nil {
		if err := check(); err != nil {
			return nil, nil, nil, err
		}
	}
	if a.actor == "" {
		a.actor = e.getenv("USER")
	}
	if a.actor == "" {
		a.actor = "unknown"
	}
	a.actor = "cli:" + a.actor
	pool, err := app.OpenPool(ctx, a.c.databaseURL, "admin", app.Pool{MaxConns: 2})
	if err != nil {
		return nil, nil, nil, withExit(exitUnavailable, err)
	}
	// A database nobody migrated would answer with Postgres's own words
	// ("relation tenants does not exist").
	if err := migrations.Check(ctx, pool); err != nil {
		pool.Close()
		if errors.Is(err, migrations.ErrNotCurrent) {
			return nil, nil, nil, usageErrorf("%s: the database's schema is not current: run chargeflow migrate first (%v)", strings.TrimPrefix(fs.Name(), "chargeflow "), err)
		}
		return nil, nil, nil, withExit(exitUnavailable, err)
	}
	return admin.New(pool), pool, pos, nil
}

// show prints v as JSON (asJSON) or as the table print writes.
func (a *adminFlags) show(e env, v any, table func(w io.Writer)) error {
	asJSON, err := a.output.json(e)
	if err != nil {
		return err
	}
	if asJSON {
		out, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(e.stdout, string(out))
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// adminError gives a refusal its exit code: not found, or refused; nil
// stays nil.
func adminError(name string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tenant.ErrNotFound), errors.Is(err, operator.ErrNotFound),
		errors.Is(err, route.ErrNoAccount), errors.Is(err, route.ErrNoTenant):
		return withExit(exitNotFound, fmt.Errorf("%s: %w", name, err))
	case errors.Is(err, tenant.ErrNameTaken), errors.Is(err, tenant.ErrInvalidName),
		errors.Is(err, operator.ErrNameTaken), errors.Is(err, operator.ErrInvalid), errors.Is(err, admin.ErrInvalidActor),
		errors.Is(err, route.ErrInvalid), errors.Is(err, route.ErrAccountExists):
		return withExit(exitRefused, fmt.Errorf("%s: %w", name, err))
	}
	return fmt.Errorf("%s: %w", name, err)
}

func runTenantCreate(ctx context.Context, e env, args []string) error {
	var a adminFlags
	var name string
	fs := newFlagSet("tenant create", e)
	a.bind(fs)
	fs.StringVar(&name, "name", "", "the tenant's name (unique); required")
	s, pool, _, err := a.open(ctx, fs, e, args, func() error {
		if name == "" {
			return usageErrorf("tenant create: --name is required")
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	t, key, err := s.CreateTenant(ctx, a.actor, name)
	if err != nil {
		return adminError("tenant create", err)
	}
	return a.show(e, map[string]string{"tenant_id": t.ID, "api_key": key}, func(w io.Writer) {
		fmt.Fprintf(w, "TENANT\t%s (%s)\nAPI KEY\t%s\n\nThe key is shown once; only its hash is kept.\n", t.ID, t.Name, key)
	})
}

func runTenantList(ctx context.Context, e env, args []string) error {
	var a adminFlags
	fs := newFlagSet("tenant list", e)
	a.bind(fs)
	_, pool, _, err := a.open(ctx, fs, e, args, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	tenants, err := tenant.List(ctx, pool)
	if err != nil {
		return err
	}
	type row struct {
		ID         string    `json:"id"`
		Name       string    `json:"name"`
		ActiveKeys int       `json:"active_keys"`
		CreatedAt  time.Time `json:"created_at"`
	}
	rows := make([]row, 0, len(tenants))
	for _, t := range tenants {
		rows = append(rows, row{t.ID, t.Name, t.ActiveKeys, t.CreatedAt.UTC()})
	}
	return a.show(e, map[string]any{"data": rows}, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tNAME\tKEYS\tCREATED")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\n", r.ID, r.Name, r.ActiveKeys, r.CreatedAt.Local().Format("2006-01-02 15:04:05"))
		}
	})
}

func runTenantKeys(ctx context.Context, e env, args []string) error {
	var a adminFlags
	fs := newFlagSet("tenant keys", e)
	a.bind(fs)
	_, pool, pos, err := a.open(ctx, fs, e, args, nil, "TENANT_ID")
	if err != nil {
		return err
	}
	defer pool.Close()
	keys, err := tenant.Keys(ctx, pool, pos[0])
	if err != nil {
		return adminError("tenant keys", err)
	}
	type row struct {
		ID        string     `json:"id"`
		Active    bool       `json:"active"`
		CreatedAt time.Time  `json:"created_at"`
		EndsAt    *time.Time `json:"ends_at"`
	}
	now := time.Now()
	rows := make([]row, 0, len(keys))
	for _, k := range keys {
		rows = append(rows, row{k.ID, k.Active(now), k.CreatedAt.UTC(), k.RevokedAt})
	}
	return a.show(e, map[string]any{"data": rows}, func(w io.Writer) {
		fmt.Fprintln(w, "KEY\tWORKS\tCREATED\tENDS")
		for _, r := range rows {
			ends := "never"
			if r.EndsAt != nil {
				ends = r.EndsAt.Local().Format("2006-01-02 15:04:05")
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.ID, strconv.FormatBool(r.Active), r.CreatedAt.Local().Format("2006-01-02 15:04:05"), ends)
		}
	})
}

func runTenantRotateKey(ctx context.Context, e env, args []string) error {
	var a adminFlags
	var overlap time.Duration
	fs := newFlagSet("tenant rotate-key", e)
	a.bind(fs)
	fs.DurationVar(&overlap, "overlap", 24*time.Hour, "how long the tenant's other keys keep working, for deploying the new one (0: they stop now; at most 720h)")
	s, pool, pos, err := a.open(ctx, fs, e, args, nil, "TENANT_ID")
	if err != nil {
		return err
	}
	defer pool.Close()
	key, keyID, ending, err := s.RotateKey(ctx, a.actor, pos[0], overlap)
	if err != nil {
		return adminError("tenant rotate-key", err)
	}
	endsAt := time.Now().Add(overlap).UTC().Truncate(time.Second)
	return a.show(e, map[string]any{"tenant_id": pos[0], "key_id": keyID, "api_key": key, "ending": ending, "ending_at": endsAt}, func(w io.Writer) {
		fmt.Fprintf(w, "API KEY\t%s\nKEY ID\t%s\n", key, keyID)
		fmt.Fprintf(w, "\nThe key is shown once. %d other keys stop working at %s.\n", len(ending), endsAt.Local().Format("2006-01-02 15:04:05"))
	})
}

func runTenantRevokeKey(ctx context.Context, e env, args []string) error {
	var a adminFlags
	fs := newFlagSet("tenant revoke-key", e)
	a.bind(fs)
	s, pool, pos, err := a.open(ctx, fs, e, args, nil, "TENANT_ID", "KEY_ID")
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := s.RevokeKey(ctx, a.actor, pos[0], pos[1]); err != nil {
		return adminError("tenant revoke-key", err)
	}
	return a.show(e, map[string]string{"tenant_id": pos[0], "key_id": pos[1], "status": "revoked"}, func(w io.Writer) {
		fmt.Fprintf(w, "Key %s of %s no longer works (each API process may trust it for its auth cache's 10 s).\n", pos[1], pos[0])
	})
}

func runOperatorCreate(ctx context.Context, e env, args []string) error {
	var a adminFlags
	var name, role string
	fs := newFlagSet("operator create", e)
	a.bind(fs)
	fs.StringVar(&name, "name", "", "the operator's name (unique; signs their actions in the audit trail); required")
	fs.StringVar(&role, "role", "", "admin (reads, forces lookups, resolves) or viewer (reads); required")
	s, pool, _, err := a.open(ctx, fs, e, args, func() error {
		if name == "" || role == "" {
			return usageErrorf("operator create: --name and --role are required")
		}
		return nil
	})
	if err != nil {
		return err
	}
	defer pool.Close()
	o, token, err := s.CreateOperator(ctx, a.actor, name, operator.Role(role))
	if err != nil {
		return adminError("operator create", err)
	}
	return a.show(e, map[string]string{"operator_id": o.ID, "token": token}, func(w io.Writer) {
		fmt.Fprintf(w, "OPERATOR\t%s (%s, %s)\nTOKEN\t%s\n\nThe token is shown once; only its hash is kept.\n", o.ID, o.Name, o.Role, token)
	})
}

func runOperatorList(ctx context.Context, e env, args []string) error {
	var a adminFlags
	fs := newFlagSet("operator list", e)
	a.bind(fs)
	_, pool, _, err := a.open(ctx, fs, e, args, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	ops, err := operator.List(ctx, pool)
	if err != nil {
		return err
	}
	type row struct {
		ID        string     `json:"id"`
		Name      string     `json:"name"`
		Role      string     `json:"role"`
		CreatedAt time.Time  `json:"created_at"`
		RevokedAt *time.Time `json:"revoked_at"`
	}
	rows := make([]row, 0, len(ops))
	for _, o := range ops {
		rows = append(rows, row{o.ID, o.Name, string(o.Role), o.CreatedAt.UTC(), o.RevokedAt})
	}
	return a.show(e, map[string]any{"data": rows}, func(w io.Writer) {
		fmt.Fprintln(w, "ID\tNAME\tROLE\tSTATUS\tCREATED")
		for _, r := range rows {
			status := "active"
			if r.RevokedAt != nil {
				status = "revoked " + r.RevokedAt.Local().Format("2006-01-02 15:04:05")
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", r.ID, r.Name, r.Role, status, r.CreatedAt.Local().Format("2006-01-02 15:04:05"))
		}
	})
}

func runOperatorRevoke(ctx context.Context, e env, args []string) error {
	var a adminFlags
	fs := newFlagSet("operator revoke", e)
	a.bind(fs)
	s, pool, pos, err := a.open(ctx, fs, e, args, nil, "NAME")
	if err != nil {
		return err
	}
	defer pool.Close()
	o, err := s.RevokeOperator(ctx, a.actor, pos[0])
	if err != nil {
		return adminError("operator revoke", err)
	}
	return a.show(e, map[string]string{"operator_id": o.ID, "name": o.Name, "status": "revoked"}, func(w io.Writer) {
		fmt.Fprintf(w, "Operator %s (%s) is revoked: their token and page sessions no longer work.\n", o.Name, o.ID)
	})
}

func runAudit(ctx context.Context, e env, args []string) error {
	var a adminFlags
	var limit int
	fs := newFlagSet("audit", e)
	a.bind(fs)
	fs.IntVar(&limit, "limit", 50, "how many records, newest first (1 to 1000)")
	s, pool, _, err := a.open(ctx, fs, e, args, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	entries, err := s.Audit(ctx, limit)
	if err != nil {
		return err
	}
	return a.show(e, map[string]any{"data": entries}, func(w io.Writer) {
		fmt.Fprintln(w, "AT\tACTOR\tACTION\tSUBJECT\tDETAIL")
		for _, en := range entries {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", en.At.Local().Format("2006-01-02 15:04:05"), en.Actor, en.Action, en.Subject, strings.ReplaceAll(en.Detail, "\t", " "))
		}
	})
}
