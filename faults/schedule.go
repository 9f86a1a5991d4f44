package faults

import (
	"fmt"
	"strconv"
	"strings"
)

// Schedule is one execution plan: deliveries run one after another, in
// order. It is plain data so results can carry it and reports print it.
type Schedule struct {
	// Fault names the fault the schedule came from; empty for a schedule
	// parsed from text.
	Fault string
	// Deliveries run in order; each starts after the previous one returned.
	Deliveries []Delivery
}

// Delivery is one invocation of the handler as a queue would make it.
type Delivery struct {
	// Job numbers the job ID the delivery carries: 1 is the original job,
	// 2 and up are producer copies (same arguments, new ID).
	Job int
	// Attempt is the queue's attempt counter for that job ID, from 1.
	Attempt int
	// Worker numbers the worker that runs the delivery. Deliveries with the
	// same number share one worker built by the job's factory.
	Worker int
}

// String renders the delivery as "j1a2w2": job 1, attempt 2, worker 2.
func (d Delivery) String() string {
	return fmt.Sprintf("j%da%dw%d", d.Job, d.Attempt, d.Worker)
}

// String renders the schedule in its short text form, deliveries in order
// separated by " > ": "j1a1w1 > j1a2w2". Parse reads it back.
func (s Schedule) String() string {
	parts := make([]string, len(s.Deliveries))
	for i, d := range s.Deliveries {
		parts[i] = d.String()
	}
	return strings.Join(parts, " > ")
}

// Parse reads a schedule from the text form String writes.
func Parse(text string) (Schedule, error) {
	var s Schedule
	if strings.TrimSpace(text) == "" {
		return s, fmt.Errorf("[twice] schedule %q: empty; want deliveries like \"j1a1w1 > j1a2w2\"", text)
	}
	for i, part := range strings.Split(text, ">") {
		d, err := parseDelivery(strings.TrimSpace(part))
		if err != nil {
			return Schedule{}, fmt.Errorf("[twice] schedule %q: delivery %d: %w", text, i+1, err)
		}
		s.Deliveries = append(s.Deliveries, d)
	}
	return s, nil
}

func parseDelivery(text string) (Delivery, error) {
	var d Delivery
	rest := text
	for _, field := range []struct {
		tag string
		dst *int
	}{{"j", &d.Job}, {"a", &d.Attempt}, {"w", &d.Worker}} {
		if !strings.HasPrefix(rest, field.tag) {
			return d, fmt.Errorf("%q: want %q next, like j1a2w2", text, field.tag)
		}
		rest = rest[len(field.tag):]
		n := 0
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		v, err := strconv.Atoi(rest[:n])
		if err != nil || v < 1 {
			return d, fmt.Errorf("%q: %q needs a number from 1, like j1a2w2", text, field.tag)
		}
		*field.dst = v
		rest = rest[n:]
	}
	if rest != "" {
		return d, fmt.Errorf("%q: unexpected %q after the worker", text, rest)
	}
	return d, nil
}
