package twiceriver

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/riverqueue/river"

	"github.com/runtwice/twice/harness"
)

// registry names a River workers bundle in messages and the report.
const registry = "River workers bundle"

// CheckWorkers checks every worker the production workers bundle
// registers: each sample (a Job built with this package, with its args
// as production inserts them) in a subtest named by its kind, and fails
// naming every registered kind no sample checks, so a worker added
// without a check fails CI. A sample's Kind is its args' Kind(); a kind
// registered under aliases (river.JobArgsWithKindAliases) counts once.
//
// River has no API that lists a bundle's kinds, so they are read from its
// unexported map by reflection, tested against the River versions this
// adapter supports; where a River version stores them otherwise the check
// fails saying so: list the kinds with Kinds' error in hand, and call
// harness.CheckRegistered with them.
func CheckWorkers(t testing.TB, workers *river.Workers, cfg harness.Config, samples ...harness.Sample) []*harness.Result {
	t.Helper()
	kinds, err := Kinds(workers)
	if err != nil {
		t.Errorf("%v", err)
		return nil
	}
	for i := range samples {
		if k, ok := samples[i].Job.Queue.(interface{ kind() string }); ok && samples[i].Kind == "" {
			samples[i].Kind = k.kind()
		}
	}
	return harness.CheckRegistered(t, registry, kinds, cfg, samples...)
}

// Kinds are the job kinds a workers bundle registers a worker for, each
// worker once (its args' Kind(), not its aliases), sorted.
func Kinds(workers *river.Workers) (kinds []string, err error) {
	if workers == nil {
		return nil, errors.New("twiceriver: the workers bundle is nil; pass the *river.Workers production registers its workers on")
	}
	defer func() {
		if p := recover(); p != nil {
			kinds, err = nil, fmt.Errorf("twiceriver: cannot list the kinds of this River version's workers bundle (%v); list them yourself and call harness.CheckRegistered", p)
		}
	}()
	m := reflect.ValueOf(workers).Elem().FieldByName("workersMap")
	if !m.IsValid() || m.Kind() != reflect.Map {
		return nil, errors.New("twiceriver: cannot list the kinds of this River version's workers bundle (it has no workersMap); list them yourself and call harness.CheckRegistered")
	}
	iter := m.MapRange()
	for iter.Next() {
		kind := iter.Key().String()
		if info := iter.Value(); info.Kind() == reflect.Struct {
			if args := info.FieldByName("jobArgs"); args.IsValid() && !args.IsNil() {
				if primary, ok := kindOfType(args.Elem().Type()); ok {
					kind = primary
				}
			}
		}
		if !slices.Contains(kinds, kind) {
			kinds = append(kinds, kind)
		}
	}
	slices.Sort(kinds)
	return kinds, nil
}

// kindOfType is the Kind() of a zero value of the args type t, the kind
// River registered its aliases under.
func kindOfType(t reflect.Type) (string, bool) {
	v := reflect.New(t).Elem()
	if t.Kind() == reflect.Pointer {
		v = reflect.New(t.Elem())
	}
	args, ok := v.Interface().(river.JobArgs)
	if !ok {
		return "", false
	}
	return args.Kind(), true
}

// kind is the job's River kind, for CheckWorkers.
func (q *riverQueue[T]) kind() string { return q.args.Kind() }
