package twicewatermill

import (
	"errors"
	"slices"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/runtwice/twice/harness"
)

// registry names a Watermill router in messages and the report.
const registry = "Watermill router"

// CheckRouter checks every handler the production router registers
// (message.Router.Handlers: its handlers by name, middleware aside): each
// sample in a subtest named by its handler, and fails naming every
// handler no sample checks, so a handler added without a check fails CI.
// A sample's Kind is the handler's name; left empty, it is the job's
// name. A sample's newHandler may well take the handler from the
// production router itself, built on the delivery's connections:
// newRouter(d).Handlers()["name"].
func CheckRouter(t testing.TB, router *message.Router, cfg harness.Config, samples ...harness.Sample) []*harness.Result {
	t.Helper()
	names, err := HandlerNames(router)
	if err != nil {
		t.Errorf("%v", err)
		return nil
	}
	for i := range samples {
		if samples[i].Kind == "" {
			samples[i].Kind = samples[i].Job.Name
		}
	}
	return harness.CheckRegistered(t, registry, names, cfg, samples...)
}

// HandlerNames are the names of the handlers a router registers, sorted.
func HandlerNames(router *message.Router) ([]string, error) {
	if router == nil {
		return nil, errors.New("twicewatermill: the router is nil; pass the *message.Router production adds its handlers to")
	}
	var names []string
	for name := range router.Handlers() {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}
