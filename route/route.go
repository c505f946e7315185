// Package route is where charges go: provider accounts, and each tenant's
// route through them (docs/routing.md).
//
// An account is one place charges can be sent: a provider's kind, its
// endpoint, and the names of the environment variables each process reads
// its credentials from — never the credentials. A tenant's route is an
// ordered list of accounts, each entry with an optional rule by currency and
// amount; a charge goes to the first enabled account whose entry takes it,
// and, when that account is failing, to the next (the worker decides that:
// docs/routing.md, "Failover"). A tenant without a route sends every charge
// to the processes' own provider, as before accounts existed.
//
// Table is a snapshot of every account and route, and Cache keeps one no
// older than its TTL, so that the accept path and the worker read routes
// from memory.
package route

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/chargeflow/chargeflow/internal/pg"
)

// DB is what the store functions run on: a pool, a connection or a
// transaction.
type DB = pg.Handle

// Kind is the protocol an account speaks.
type Kind string

const (
	// KindFake is chargeflow's own protocol: the bundled fake provider.
	KindFake Kind = "fake"
	// KindStripe is Stripe's API (psp/stripe).
	KindStripe Kind = "stripe"
	// KindAdyen is Adyen's Checkout API v71 (psp/adyen).
	KindAdyen Kind = "adyen"
)

// Kinds lists every kind an account may have.
var Kinds = []Kind{KindFake, KindStripe, KindAdyen}

// Reserved are names an account cannot take: the names the processes' own
// providers carry on charges and in notification paths.
var Reserved = []string{"fake", "fakepsp", "stripe", "adyen"}

// MaxEntries is the longest a route may be.
const MaxEntries = 16

// Account is one place charges can be sent.
type Account struct {
	// Name is what charges sent here carry in their provider column, and
	// the path its notifications are posted to
	// (/v1/provider_webhooks/{name}).
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	// Endpoint is the provider's base URL: for Adyen it includes the
	// version (https://checkout-test.adyen.com/v71).
	Endpoint string `json:"endpoint"`
	// CredentialEnv names the environment variable holding the API key;
	// required but for the fake. WebhookSecretEnv names the one holding
	// the secret notifications are verified with (none: notifications are
	// not received for the account).
	CredentialEnv    string `json:"credential_env,omitempty"`
	WebhookSecretEnv string `json:"webhook_secret_env,omitempty"`
	// MerchantAccount is Adyen's merchant account; required for Adyen.
	MerchantAccount string `json:"merchant_account,omitempty"`

	CreatedAt  time.Time  `json:"created_at"`
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
}

// Enabled reports whether new charges may go to a.
func (a Account) Enabled() bool { return a.DisabledAt == nil }

// ErrInvalid wraps every refusal of an account or a route that is not
// well formed; the message says which field.
var ErrInvalid = errors.New("route: invalid")

// ErrNoAccount means no account has the name.
var ErrNoAccount = errors.New("route: no such provider account")

// ErrAccountExists means the name is taken.
var ErrAccountExists = errors.New("route: a provider account with that name exists")

// ErrNoTenant means no tenant has the id.
var ErrNoTenant = errors.New("route: no such tenant")

// ErrNoRoute means the tenant's route has no enabled account that takes a
// charge of that currency and amount.
var ErrNoRoute = errors.New("route: no account of the tenant's route takes the charge")

var (
	namePattern     = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,39}$`)
	envPattern      = regexp.MustCompile(`^[A-Z][A-Z0-9_]{0,127}$`)
	merchantPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}$`)
	endpointPattern = regexp.MustCompile(`^https?://[^\s]+$`)
	currencyPattern = regexp.MustCompile(`^[A-Z]{3}$`)
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Check says what, if anything, is wrong with a, as the table's
// constraints would, in words.
func (a Account) Check() error {
	switch {
	case !namePattern.MatchString(a.Name):
		return invalid("an account's name is a lower-case letter then up to 39 of a-z, 0-9, _ and -")
	case slices.Contains(Reserved, a.Name):
		return invalid("%q is the name of the processes' own provider; pick another", a.Name)
	case !slices.Contains(Kinds, a.Kind):
		return invalid("kind %q: want fake, stripe or adyen", a.Kind)
	case len(a.Endpoint) > 2048 || !endpointPattern.MatchString(a.Endpoint):
		return invalid("the endpoint is an http:// or https:// URL of at most 2048 bytes")
	case hasUserinfo(a.Endpoint):
		// It would be stored, shown and written to the admin audit.
		return invalid("the endpoint carries no user or password: credentials come from the variables it names")
	case a.CredentialEnv != "" && !IsVariableName(a.CredentialEnv):
		return invalid("the credential is the name of an environment variable (A-Z, 0-9, _), never the secret itself")
	case a.WebhookSecretEnv != "" && !IsVariableName(a.WebhookSecretEnv):
		return invalid("the webhook secret is the name of an environment variable (A-Z, 0-9, _), never the secret itself")
	case a.Kind != KindFake && a.CredentialEnv == "":
		return invalid("a %s account needs the name of the environment variable holding its API key", a.Kind)
	case a.MerchantAccount != "" && !merchantPattern.MatchString(a.MerchantAccount):
		return invalid("the merchant account is 1 to 100 of A-Z, a-z, 0-9, _, . and -")
	case a.Kind == KindAdyen && a.MerchantAccount == "":
		return invalid("an adyen account needs its merchant account")
	}
	return nil
}

// IsVariableName reports whether s can name the environment variable an
// account reads a secret from (CredentialEnv, WebhookSecretEnv): a value
// that cannot may be the secret itself, and is not to be shown again.
func IsVariableName(s string) bool { return envPattern.MatchString(s) }

// hasUserinfo reports whether endpoint names a user (and maybe a
// password) before its host, or cannot be read as a URL at all.
func hasUserinfo(endpoint string) bool {
	u, err := url.Parse(endpoint)
	return err != nil || u.User != nil
}

// Entry is one account of a route, with the charges it takes.
type Entry struct {
	Account string `json:"account"`
	// Currencies the entry takes (upper-case ISO 4217); empty takes any.
	Currencies []string `json:"currencies,omitempty"`
	// MinAmount and MaxAmount bound the amount taken, in minor units;
	// zero is no bound.
	MinAmount int64 `json:"min_amount,omitempty"`
	MaxAmount int64 `json:"max_amount,omitempty"`
}

// Takes reports whether e's rule takes a charge of currency and amount.
func (e Entry) Takes(currency string, amount int64) bool {
	return (len(e.Currencies) == 0 || slices.Contains(e.Currencies, currency)) &&
		(e.MinAmount == 0 || amount >= e.MinAmount) && (e.MaxAmount == 0 || amount <= e.MaxAmount)
}

// String shows e's rule as the CLI takes it: account[:CUR,CUR][:min-max].
func (e Entry) String() string {
	s := e.Account
	if len(e.Currencies) > 0 || e.MinAmount > 0 || e.MaxAmount > 0 {
		s += ":" + strings.Join(e.Currencies, ",")
	}
	if e.MinAmount > 0 || e.MaxAmount > 0 {
		s += ":" + bound(e.MinAmount) + "-" + bound(e.MaxAmount)
	}
	return s
}

// Describe says in words which charges e takes: "every charge", "EUR or
// GBP, any amount", "any currency, up to 100000 in minor units".
func (e Entry) Describe() string {
	if len(e.Currencies) == 0 && e.MinAmount == 0 && e.MaxAmount == 0 {
		return "every charge"
	}
	currencies := "any currency"
	if n := len(e.Currencies); n > 0 {
		currencies = e.Currencies[n-1]
		if n > 1 {
			currencies = strings.Join(e.Currencies[:n-1], ", ") + " or " + currencies
		}
	}
	amounts := "any amount"
	switch {
	case e.MinAmount > 0 && e.MaxAmount > 0:
		amounts = fmt.Sprintf("%d to %d in minor units", e.MinAmount, e.MaxAmount)
	case e.MinAmount > 0:
		amounts = fmt.Sprintf("from %d in minor units", e.MinAmount)
	case e.MaxAmount > 0:
		amounts = fmt.Sprintf("up to %d in minor units", e.MaxAmount)
	}
	return currencies + ", " + amounts
}

func bound(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprint(n)
}

// CheckEntries says what, if anything, is wrong with a route.
func CheckEntries(entries []Entry) error {
	if len(entries) > MaxEntries {
		return invalid("a route has at most %d accounts", MaxEntries)
	}
	seen := map[string]bool{}
	for i, e := range entries {
		n := i + 1
		switch {
		case seen[e.Account]:
			return invalid("entry %d: account %q is in the route twice", n, e.Account)
		case !namePattern.MatchString(e.Account):
			return invalid("entry %d: %q is not an account's name", n, e.Account)
		case len(e.Currencies) > 32:
			return invalid("entry %d: at most 32 currencies", n)
		case e.MinAmount < 0 || e.MaxAmount < 0:
			return invalid("entry %d: amounts are positive", n)
		case e.MaxAmount > 0 && e.MaxAmount < e.MinAmount:
			return invalid("entry %d: the largest amount is below the smallest", n)
		}
		for _, c := range e.Currencies {
			if !currencyPattern.MatchString(c) {
				return invalid("entry %d: currency %q is not three upper-case letters", n, c)
			}
		}
		seen[e.Account] = true
	}
	return nil
}

// ParseEntry reads one entry as Entry.String shows it and the CLI takes
// it: account[:CUR,CUR][:min-max] — "eu-adyen:EUR,GBP", "us-stripe::-100000",
// "big:USD:100000-", "backup". Anything else is ErrInvalid, with a message
// that quotes the entry and says what is wrong with it.
func ParseEntry(s string) (Entry, error) {
	bad := func(format string, args ...any) error {
		return invalid("entry %q: %s", s, fmt.Sprintf(format, args...))
	}
	parts := strings.Split(s, ":")
	if len(parts) > 3 {
		return Entry{}, bad("want account[:CUR,CUR][:min-max], at most two colons")
	}
	e := Entry{Account: parts[0]}
	if !namePattern.MatchString(e.Account) {
		return Entry{}, bad("%q is not an account's name: a lower-case letter, then up to 39 of a-z, 0-9, _ and -", e.Account)
	}
	if len(parts) == 2 && parts[1] == "" {
		return Entry{}, bad("nothing after the colon: leave it out to take every charge")
	}
	if len(parts) == 2 && parts[1] != "-" && amountsPattern.MatchString(parts[1]) {
		return Entry{}, bad("the currencies come first; amounts alone are %s::%s", e.Account, parts[1])
	}
	if len(parts) >= 2 && parts[1] != "" {
		for c := range strings.SplitSeq(parts[1], ",") {
			switch {
			case !currencyPattern.MatchString(c):
				return Entry{}, bad("currency %q is not three upper-case letters (ISO 4217, such as EUR)", c)
			case slices.Contains(e.Currencies, c):
				return Entry{}, bad("currency %s is there twice", c)
			}
			e.Currencies = append(e.Currencies, c)
		}
		if len(e.Currencies) > 32 {
			return Entry{}, bad("at most 32 currencies")
		}
	}
	if len(parts) == 3 {
		m := amountsPattern.FindStringSubmatch(parts[2])
		if m == nil || parts[2] == "-" {
			return Entry{}, bad("amounts %q: want min-max in minor units, either side left out for no bound (100-5000, -5000, 100-)", parts[2])
		}
		for i, side := range []*int64{&e.MinAmount, &e.MaxAmount} {
			if m[i+1] == "" {
				continue
			}
			n, err := strconv.ParseInt(m[i+1], 10, 64)
			switch {
			case err != nil:
				return Entry{}, bad("amount %s is too large", m[i+1])
			case n == 0:
				return Entry{}, bad("amounts start at 1; leave a side out for no bound")
			}
			*side = n
		}
		if e.MaxAmount > 0 && e.MaxAmount < e.MinAmount {
			return Entry{}, bad("the largest amount, %d, is below the smallest, %d", e.MaxAmount, e.MinAmount)
		}
	}
	return e, nil
}

// amountsPattern is an entry's amounts: min-max, digits, either side empty.
var amountsPattern = regexp.MustCompile(`^([0-9]*)-([0-9]*)$`)

// ParseEntries reads a route: entries as ParseEntry takes them, separated
// by white space (spaces, tabs or lines), checked together as CheckEntries
// does. No entry at all is an empty route, which callers refuse or take
// for "no route" as they mean to.
func ParseEntries(text string) ([]Entry, error) {
	words := strings.Fields(text)
	if len(words) > MaxEntries {
		return nil, invalid("a route has at most %d accounts; this one has %d", MaxEntries, len(words))
	}
	entries := make([]Entry, 0, len(words))
	for _, w := range words {
		e, err := ParseEntry(w)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	if err := CheckEntries(entries); err != nil {
		return nil, err
	}
	return entries, nil
}

// AddAccount creates a.
func AddAccount(ctx context.Context, db DB, a Account) (Account, error) {
	if err := a.Check(); err != nil {
		return Account{}, err
	}
	err := db.QueryRow(ctx, `INSERT INTO provider_accounts (name, kind, endpoint, credential_env, webhook_secret_env, merchant_account)
		VALUES ($1, $2, $3, nullif($4, ''), nullif($5, ''), nullif($6, '')) RETURNING created_at`,
		a.Name, string(a.Kind), a.Endpoint, a.CredentialEnv, a.WebhookSecretEnv, a.MerchantAccount).Scan(&a.CreatedAt)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return Account{}, fmt.Errorf("%w: %q", ErrAccountExists, a.Name)
	}
	if err != nil {
		return Account{}, fmt.Errorf("add provider account %s: %w", a.Name, err)
	}
	return a, nil
}

// DisableAccount stops new charges from going to the account called name;
// charges already sent there are still looked up and settled through it.
func DisableAccount(ctx context.Context, db DB, name string) (Account, error) {
	rows, err := db.Query(ctx, `UPDATE provider_accounts SET disabled_at = coalesce(disabled_at, now()) WHERE name = $1
		RETURNING `+accountColumns, name)
	if err != nil {
		return Account{}, fmt.Errorf("disable provider account %s: %w", name, err)
	}
	a, err := pgx.CollectExactlyOneRow(rows, scanAccount)
	if errors.Is(err, pgx.ErrNoRows) {
		return Account{}, fmt.Errorf("%w: %q", ErrNoAccount, name)
	}
	if err != nil {
		return Account{}, fmt.Errorf("disable provider account %s: %w", name, err)
	}
	return a, nil
}

const accountColumns = `name, kind, endpoint, coalesce(credential_env, ''), coalesce(webhook_secret_env, ''),
	coalesce(merchant_account, ''), created_at, disabled_at`

func scanAccount(row pgx.CollectableRow) (Account, error) {
	var a Account
	err := row.Scan(&a.Name, &a.Kind, &a.Endpoint, &a.CredentialEnv, &a.WebhookSecretEnv, &a.MerchantAccount,
		&a.CreatedAt, &a.DisabledAt)
	return a, err
}

// Accounts lists every account, by name.
func Accounts(ctx context.Context, db DB) ([]Account, error) {
	rows, err := db.Query(ctx, `SELECT `+accountColumns+` FROM provider_accounts ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list provider accounts: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanAccount)
	if err != nil {
		return nil, fmt.Errorf("list provider accounts: %w", err)
	}
	return out, nil
}

// SetRoute replaces tenantID's route with entries (none: the tenant's
// charges go to the processes' own provider again). The tenant must exist
// (ErrNoTenant), and every account (ErrNoAccount); a disabled one may stay
// in a route, and is skipped.
func SetRoute(ctx context.Context, db DB, tenantID string, entries []Entry) error {
	if err := CheckEntries(entries); err != nil {
		return err
	}
	// The tenant is read, and kept from being deleted until db's
	// transaction ends, before anything is written: emptying the route of
	// a tenant that does not exist would otherwise succeed, with nothing
	// to say it did not.
	if err := lockTenant(ctx, db, tenantID); err != nil {
		return err
	}
	if _, err := db.Exec(ctx, `DELETE FROM tenant_routes WHERE tenant_id = $1`, tenantID); err != nil {
		return fmt.Errorf("set route of %s: %w", tenantID, err)
	}
	for i, e := range entries {
		var currencies []string
		if len(e.Currencies) > 0 {
			currencies = e.Currencies
		}
		_, err := db.Exec(ctx, `INSERT INTO tenant_routes (tenant_id, position, account, currencies, min_amount, max_amount)
			VALUES ($1, $2, $3, $4, nullif($5, 0), nullif($6, 0))`, tenantID, i+1, e.Account, currencies, e.MinAmount, e.MaxAmount)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23503" && pgErr.ConstraintName == "tenant_routes_account_fkey" {
			return fmt.Errorf("%w: %q", ErrNoAccount, e.Account)
		}
		if errors.As(err, &pgErr) && pgErr.Code == "23503" {
			return fmt.Errorf("%w: %q", ErrNoTenant, tenantID)
		}
		if err != nil {
			return fmt.Errorf("set route of %s: %w", tenantID, err)
		}
	}
	return nil
}

// lockTenant is ErrNoTenant when no tenant has the id, and otherwise keeps
// the tenant from being deleted until db's transaction ends.
func lockTenant(ctx context.Context, db DB, tenantID string) error {
	rows, err := db.Query(ctx, `SELECT 1 FROM tenants WHERE id = $1 FOR KEY SHARE`, tenantID)
	if err != nil {
		return fmt.Errorf("read tenant %s: %w", tenantID, err)
	}
	_, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[int])
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %q", ErrNoTenant, tenantID)
	}
	if err != nil {
		return fmt.Errorf("read tenant %s: %w", tenantID, err)
	}
	return nil
}

// Route reads tenantID's route, in order: empty when it has none,
// ErrNoTenant when no tenant has the id.
func Route(ctx context.Context, db DB, tenantID string) ([]Entry, error) {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1)`, tenantID).Scan(&exists); err != nil {
		return nil, fmt.Errorf("read the route of %s: %w", tenantID, err)
	}
	if !exists {
		return nil, fmt.Errorf("%w: %q", ErrNoTenant, tenantID)
	}
	rows, err := db.Query(ctx, `SELECT `+entryColumns+` FROM tenant_routes WHERE tenant_id = $1 ORDER BY position`, tenantID)
	if err != nil {
		return nil, fmt.Errorf("read the route of %s: %w", tenantID, err)
	}
	entries, err := pgx.CollectRows(rows, scanEntry)
	if err != nil {
		return nil, fmt.Errorf("read the route of %s: %w", tenantID, err)
	}
	return entries, nil
}

const entryColumns = `account, coalesce(currencies, '{}'), coalesce(min_amount, 0), coalesce(max_amount, 0)`

func scanEntry(row pgx.CollectableRow) (Entry, error) {
	var e Entry
	err := row.Scan(&e.Account, &e.Currencies, &e.MinAmount, &e.MaxAmount)
	if len(e.Currencies) == 0 {
		e.Currencies = nil
	}
	return e, err
}

// Routes reads every tenant's route, in order.
func Routes(ctx context.Context, db DB) (map[string][]Entry, error) {
	rows, err := db.Query(ctx, `SELECT tenant_id, `+entryColumns+` FROM tenant_routes ORDER BY tenant_id, position`)
	if err != nil {
		return nil, fmt.Errorf("read routes: %w", err)
	}
	out := map[string][]Entry{}
	var tenantID string
	var e Entry
	_, err = pgx.ForEachRow(rows, []any{&tenantID, &e.Account, &e.Currencies, &e.MinAmount, &e.MaxAmount}, func() error {
		if len(e.Currencies) == 0 {
			e.Currencies = nil
		}
		out[tenantID] = append(out[tenantID], e)
		e = Entry{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read routes: %w", err)
	}
	return out, nil
}

// Table is a snapshot of every account and route.
type Table struct {
	accounts map[string]Account
	routes   map[string][]Entry
}

// Load reads a Table.
func Load(ctx context.Context, db DB) (*Table, error) {
	accounts, err := Accounts(ctx, db)
	if err != nil {
		return nil, err
	}
	routes, err := Routes(ctx, db)
	if err != nil {
		return nil, err
	}
	t := &Table{accounts: make(map[string]Account, len(accounts)), routes: routes}
	for _, a := range accounts {
		t.accounts[a.Name] = a
	}
	return t, nil
}

// Account is the account called name.
func (t *Table) Account(name string) (Account, bool) {
	a, ok := t.accounts[name]
	return a, ok
}

// Accounts lists every account, by name.
func (t *Table) Accounts() []Account {
	out := make([]Account, 0, len(t.accounts))
	for _, a := range t.accounts {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b Account) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Route is tenantID's route; empty when it has none.
func (t *Table) Route(tenantID string) []Entry { return t.routes[tenantID] }

// Candidates lists, in route order, the enabled accounts of tenantID's
// route that take a charge of currency and amount. ok is false when the
// tenant has no route at all (its charges go to the processes' own
// provider).
func (t *Table) Candidates(tenantID, currency string, amount int64) (names []string, ok bool) {
	entries, ok := t.routes[tenantID]
	if !ok {
		return nil, false
	}
	for _, e := range entries {
		if a, found := t.accounts[e.Account]; found && a.Enabled() && e.Takes(currency, amount) {
			names = append(names, e.Account)
		}
	}
	return names, true
}

// Pick is the account a new charge of tenantID goes to: the first
// candidate, or fallback (the processes' own provider) for a tenant without
// a route. A route with no candidate is ErrNoRoute.
func (t *Table) Pick(tenantID, currency string, amount int64, fallback string) (string, error) {
	names, ok := t.Candidates(tenantID, currency, amount)
	switch {
	case !ok:
		return fallback, nil
	case len(names) == 0:
		return "", fmt.Errorf("%w (%s %d)", ErrNoRoute, currency, amount)
	}
	return names[0], nil
}

// Next is the account a charge at current moves to when current is
// failing: the first candidate after current in route order that usable
// allows (current itself never), or, when current is no longer in the
// route, the first usable candidate. ok is false when there is none.
func (t *Table) Next(tenantID, currency string, amount int64, current string, usable func(string) bool) (string, bool) {
	names, _ := t.Candidates(tenantID, currency, amount)
	if i := slices.Index(names, current); i >= 0 {
		names = names[i+1:]
	}
	for _, name := range names {
		if name != current && usable(name) {
			return name, true
		}
	}
	return "", false
}

// DefaultTTL is how old a Cache's table may be: how long after a change to
// accounts or routes a process may still route by the old ones.
const DefaultTTL = 5 * time.Second

// Cache keeps a Table no older than its TTL. Reading a fresh table takes
// no lock; one reader reads it again once it is stale, and the others wait
// for that read.
type Cache struct {
	db  DB
	ttl time.Duration

	current atomic.Pointer[cached]
	mu      sync.Mutex
}

type cached struct {
	table  *Table
	loaded time.Time
}

// NewCache makes a Cache reading db; ttl zero is DefaultTTL.
func NewCache(db DB, ttl time.Duration) *Cache {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Cache{db: db, ttl: ttl}
}

// Table is the cached table, read again when older than the TTL. A failed
// read is an error: routing by a table older than promised could send a
// charge to an account an administrator disabled.
func (c *Cache) Table(ctx context.Context) (*Table, error) {
	if cur := c.current.Load(); cur != nil && time.Since(cur.loaded) < c.ttl {
		return cur.table, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.current.Load(); cur != nil && time.Since(cur.loaded) < c.ttl {
		return cur.table, nil
	}
	t, err := Load(ctx, c.db)
	if err != nil {
		return nil, err
	}
	c.current.Store(&cached{table: t, loaded: time.Now()})
	return t, nil
}
