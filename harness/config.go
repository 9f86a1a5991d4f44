package harness

import (
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/runtwice/twice/faults"
)

// Config says how to check a job. The zero value runs run-twice and producer-retry on an
// empty database.
type Config struct {
	// Setup builds the schema and fixtures every scenario starts from,
	// applied in order.
	Setup []Setup
	// Faults to run; nil runs faults.RunTwice and faults.ProducerRetry.
	Faults []faults.Fault
	// IgnoreTables leaves tables out of the comparison.
	IgnoreTables []string
	// IgnoreColumns leaves columns out: "table.column", or "column" for
	// every table.
	IgnoreColumns []string
	// CmpOptions are passed to go-cmp when rows are compared.
	CmpOptions []cmp.Option
	// ExpectFinding marks a job known not to be idempotent, with the
	// reason. Check then passes while twice still finds the problem and
	// fails once the job has become idempotent, so demos and known issues
	// do not fail a suite and fixed ones are noticed.
	ExpectFinding string
	// DeliveryTimeout bounds each delivery; zero means 30s.
	DeliveryTimeout time.Duration
}

func (c Config) deliveryTimeout() time.Duration {
	if c.DeliveryTimeout > 0 {
		return c.DeliveryTimeout
	}
	return 30 * time.Second
}

func (c Config) faults() []faults.Fault {
	if c.Faults != nil {
		return c.Faults
	}
	// faults.Default needs the wire proxy's executor; until it lands the
	// default is what runs without it.
	return []faults.Fault{faults.RunTwice(), faults.ProducerRetry()}
}
