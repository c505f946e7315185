// Package architecture holds no code: its tests keep docs/ true. Every
// package must be in docs/architecture.md's package table, each row's
// "imports of ours" must be exactly what the package imports (test files
// aside), and every import must point to a lower layer, so dependencies go
// one way and no package imports a sibling. And README.md or docs/ must name
// every problem code, metric and crash scenario the code defines, wherever
// its package lives.
package architecture
