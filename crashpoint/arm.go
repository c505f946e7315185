//go:build lab

// The arming half of the package, compiled only into the laboratory's
// build (-tags lab): a spec is a comma-separated list of point=action,
// where action is
//
//	exit            os.Exit(ExitCode) at once: no deferred work runs, sockets close
//	pause:DURATION  sleep, e.g. pause:5s (a test may SIGKILL the process meanwhile)
//	error           return ErrInjected from Hit
//
// optionally followed by @P, the probability of firing on each hit (default
// 1), drawn from a source seeded by the caller so runs replay, or by #N: fire
// on the Nth hit of this process only, which makes a crash certain without
// stopping all progress. Example:
//
//	worker.after_psp_response_before_save=exit#5,reconciler.after_lease=pause:3s@0.5
//
// Every time a point fires it logs "crashpoint fired" with the point's name
// first, so a scenario can prove its fault path was taken.

package crashpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ExitCode is the status a process exits with when an exit point fires.
const ExitCode = 86

// ErrInjected is what an error point returns.
var ErrInjected = errors.New("crashpoint: injected error")

// Action is what an armed point does when it fires.
type Action string

const (
	// ActionExit ends the process at once.
	ActionExit Action = "exit"
	// ActionPause sleeps for the point's duration.
	ActionPause Action = "pause"
	// ActionError makes Hit return ErrInjected.
	ActionError Action = "error"
)

type arm struct {
	action      Action
	pause       time.Duration
	probability float64
	// nth, when > 0, fires on the nth hit only; hits counts them.
	nth  int64
	hits *atomic.Int64
}

// Set is the armed points of one process. A nil *Set is disarmed.
type Set struct {
	arms   map[string]arm
	exit   func(code int)
	logger *slog.Logger

	mu  sync.Mutex
	rnd *rand.Rand
}

// Parse arms the points a spec names. An empty spec returns nil: disarmed.
func Parse(spec string, seed uint64, logger *slog.Logger) (*Set, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	s := &Set{
		arms:   map[string]arm{},
		exit:   os.Exit,
		logger: logger,
		rnd:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
	for item := range strings.SplitSeq(spec, ",") {
		name, action, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return nil, fmt.Errorf("crashpoint %q: want point=action", item)
		}
		if !slices.Contains(Names(), name) {
			return nil, fmt.Errorf("crashpoint %q: unknown point (known: %s)", name, strings.Join(Names(), ", "))
		}
		a := arm{probability: 1, hits: &atomic.Int64{}}
		action, nth, hasNth := strings.Cut(action, "#")
		action, p, hasP := strings.Cut(action, "@")
		switch {
		case hasNth && hasP:
			return nil, fmt.Errorf("crashpoint %q: give either @P or #N, not both", name)
		case hasNth:
			n, err := strconv.ParseInt(nth, 10, 64)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("crashpoint %q: #%s is not a positive hit number", name, nth)
			}
			a.nth = n
		case hasP:
			prob, err := strconv.ParseFloat(p, 64)
			if err != nil || prob < 0 || prob > 1 {
				return nil, fmt.Errorf("crashpoint %q: probability %q is not in [0,1]", name, p)
			}
			a.probability = prob
		}
		kind, arg, _ := strings.Cut(action, ":")
		switch Action(kind) {
		case ActionExit, ActionError:
			if arg != "" {
				return nil, fmt.Errorf("crashpoint %q: %s takes no argument", name, kind)
			}
		case ActionPause:
			d, err := time.ParseDuration(arg)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("crashpoint %q: pause needs a positive duration, e.g. pause:2s", name)
			}
			a.pause = d
		default:
			return nil, fmt.Errorf("crashpoint %q: unknown action %q (exit, pause:DURATION, error)", name, kind)
		}
		a.action = Action(kind)
		s.arms[name] = a
	}
	return s, nil
}

// Hit is a crash point. Disarmed, or when the draw says no, it returns nil.
func (s *Set) Hit(ctx context.Context, name string) error {
	if s == nil {
		return nil
	}
	a, ok := s.arms[name]
	if !ok {
		return nil
	}
	if a.nth > 0 && a.hits.Add(1) != a.nth {
		return nil
	}
	if a.probability < 1 {
		s.mu.Lock()
		fire := s.rnd.Float64() < a.probability
		s.mu.Unlock()
		if !fire {
			return nil
		}
	}
	s.logger.WarnContext(ctx, "crashpoint fired", "point", name, "action", string(a.action), "pause", a.pause.String())
	switch a.action {
	case ActionExit:
		s.exit(ExitCode)
	case ActionPause:
		time.Sleep(a.pause)
	case ActionError:
		return fmt.Errorf("%w at %s", ErrInjected, name)
	}
	return nil
}

// Has reports whether the point name is armed.
func (s *Set) Has(name string) bool {
	if s == nil {
		return false
	}
	_, ok := s.arms[name]
	return ok
}

// Armed reports whether any point is armed.
func (s *Set) Armed() bool { return s != nil && len(s.arms) > 0 }

// WithExit replaces os.Exit: tests of this package give a recorder, and a
// process whose log lines are written asynchronously flushes them first.
func (s *Set) WithExit(exit func(code int)) *Set {
	s.exit = exit
	return s
}
