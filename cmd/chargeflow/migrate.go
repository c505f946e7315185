package main

import (
	"context"

	"github.com/chargeflow/chargeflow/internal/app"
	"github.com/chargeflow/chargeflow/migrations"
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
