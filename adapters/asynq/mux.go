package twiceasynq

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/runtwice/twice/harness"
)

// registry names an asynq ServeMux in messages and the report.
const registry = "asynq ServeMux"

// CheckMux checks every handler the production mux registers: each
// sample (a Job built with this package, with its task as production
// enqueues it; its newHandler may well return the production mux itself,
// built on the delivery's connections) in a subtest named by the pattern
// its task type matches, as the mux routes it, and fails naming every
// registered pattern no sample reaches, so a handler added without a
// check fails CI. A sample whose task no pattern matches fails too: the
// mux would answer it "handler not found".
//
// asynq has no API that lists a mux's patterns, so they are read from its
// unexported map by reflection, tested against the asynq versions this
// adapter supports; where an asynq version stores them otherwise the
// check fails saying so: list the patterns yourself and call
// harness.CheckRegistered with them.
func CheckMux(t testing.TB, mux *asynq.ServeMux, cfg harness.Config, samples ...harness.Sample) []*harness.Result {
	t.Helper()
	patterns, err := Patterns(mux)
	if err != nil {
		t.Errorf("%v", err)
		return nil
	}
	for i := range samples {
		q, ok := samples[i].Job.Queue.(*asynqQueue)
		if !ok || samples[i].Kind != "" || q.task == nil {
			continue
		}
		samples[i].Kind = q.task.Type()
		if _, pattern := mux.Handler(q.task); pattern != "" {
			samples[i].Kind = pattern
		}
	}
	return harness.CheckRegistered(t, registry, patterns, cfg, samples...)
}

// Patterns are the patterns a mux registers a handler for, sorted.
func Patterns(mux *asynq.ServeMux) (patterns []string, err error) {
	if mux == nil {
		return nil, errors.New("twiceasynq: the mux is nil; pass the *asynq.ServeMux production registers its handlers on")
	}
	defer func() {
		if p := recover(); p != nil {
			patterns, err = nil, fmt.Errorf("twiceasynq: cannot list the patterns of this asynq version's ServeMux (%v); list them yourself and call harness.CheckRegistered", p)
		}
	}()
	m := reflect.ValueOf(mux).Elem().FieldByName("m")
	if !m.IsValid() || m.Kind() != reflect.Map {
		return nil, errors.New("twiceasynq: cannot list the patterns of this asynq version's ServeMux (it has no map m); list them yourself and call harness.CheckRegistered")
	}
	for _, k := range m.MapKeys() {
		patterns = append(patterns, k.String())
	}
	slices.Sort(patterns)
	return patterns, nil
}
