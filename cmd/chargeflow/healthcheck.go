package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// runHealthcheck GETs one URL and fails unless the answer is a 2xx. It is
// the container image's HEALTHCHECK: the final image has no shell, curl or
// wget, so the probe is the binary itself (docs/deployment.md). Like every
// command it exits 2 on failure; Docker counts any non-zero exit as a failed
// probe.
func runHealthcheck(ctx context.Context, e env, args []string) error {
	var rawURL string
	var timeout time.Duration
	fs := newFlagSet("healthcheck", e)
	fs.StringVar(&rawURL, "url", "http://127.0.0.1:8080/readyz", "the URL to GET; any 2xx answer is healthy")
	fs.DurationVar(&timeout, "timeout", 2*time.Second, "how long the whole request may take (keep it under the container's health check timeout, so this reports why)")
	// A probe's flags are all on its command line: it runs in a container
	// whose environment configures the role it probes.
	if err := parseToolFlags(fs, e, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("healthcheck: unexpected argument %q (the URL goes in --url)", fs.Arg(0))
	}
	if u, err := url.Parse(rawURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("healthcheck: --url %q: want an http:// or https:// URL", rawURL)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	// A probe talks to its own container directly: no proxy from the
	// environment, and no connection kept for a next probe that is another
	// process.
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	// Docker keeps a probe's output; the start of the body says why a
	// readiness check failed.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("healthcheck: GET %s: %s: %s", rawURL, resp.Status, strings.TrimSpace(string(body)))
	}
	_, err = fmt.Fprintf(e.stdout, "GET %s: %s\n", rawURL, resp.Status)
	return err
}
