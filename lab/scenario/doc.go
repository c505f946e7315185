// Package scenario checks, against the provider's ledger as ground truth,
// that chargeflow never charges twice and never loses or guesses an outcome.
//
// CheckLedger compares every charge in the database with every charge that
// moved money at the provider and names each broken invariant (docs/scenarios.md).
// CheckWebhooks does the same for what a merchant's Receiver was told: every
// settling move's event delivered, signed, and nothing invented.
package scenario
