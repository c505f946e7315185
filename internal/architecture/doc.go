// Package architecture holds no code: its test keeps docs/architecture.md's
// package table true. Every package must be in the table, each row's
// "imports of ours" must be exactly what the package imports (test files
// aside), and every import must point to a lower layer, so dependencies go
// one way and no package imports a sibling.
package architecture
