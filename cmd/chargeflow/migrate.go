package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/migrations"
	"github.com/chargeflow/chargeflow/operator"
	"github.com/chargeflow/chargeflow/tenant"
)

// runMigrate applies every migration, River's included.
func runMigrate(ctx context.Context, e env, args []string) error {
	var c common
	fs := newFlagSet("migrate", e)
	c.bind(fs)
	if err := parseFlags(fs, e, args); err != nil {
		return err
	}
	logger, err := c.logger(e)
	if err != nil {
		return err
	}
	logger = logger.With("role", "migrate")
	pool, err := app.OpenPool(ctx, c.databaseURL, "migrate", app.Pool{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	return migrations.Apply(ctx, pool, logger)
}

// runTenant manages tenants: `tenant create --name NAME`.
func runTenant(ctx context.Context, e env, args []string) error {
	if len(args) == 0 || args[0] != "create" {
		return errors.New("usage: chargeflow tenant create --name NAME")
	}
	var c common
	var name string
	fs := newFlagSet("tenant create", e)
	c.bind(fs)
	fs.StringVar(&name, "name", "", "the tenant's name (unique)")
	if err := parseToolFlags(fs, e, args[1:], "database-url", "log-level"); err != nil {
		return err
	}
	if name == "" {
		return errors.New("tenant create: --name is required")
	}
	pool, err := app.OpenPool(ctx, c.databaseURL, "tenant", app.Pool{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	t, key, err := tenant.Create(ctx, pool, name)
	if err != nil {
		return err
	}
	out, err := json.Marshal(map[string]string{"tenant_id": t.ID, "api_key": key})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "%s\n", out)
	return err
}

// runOperator manages operators: `operator create --name NAME --role
// admin|viewer` prints {"operator_id", "token"}. The token is shown once;
// only its hash is kept.
func runOperator(ctx context.Context, e env, args []string) error {
	if len(args) == 0 || args[0] != "create" {
		return errors.New("usage: chargeflow operator create --name NAME --role admin|viewer")
	}
	var c common
	var name, role string
	fs := newFlagSet("operator create", e)
	c.bind(fs)
	fs.StringVar(&name, "name", "", "the operator's name (unique; signs their actions in the audit trail)")
	fs.StringVar(&role, "role", "", "admin (reads, forces lookups, resolves) or viewer (reads)")
	if err := parseToolFlags(fs, e, args[1:], "database-url", "log-level"); err != nil {
		return err
	}
	if name == "" || role == "" {
		return errors.New("operator create: --name and --role are required")
	}
	pool, err := app.OpenPool(ctx, c.databaseURL, "operator", app.Pool{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	op, token, err := operator.Create(ctx, pool, name, operator.Role(role))
	if err != nil {
		return err
	}
	out, err := json.Marshal(map[string]string{"operator_id": op.ID, "token": token})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "%s\n", out)
	return err
}
