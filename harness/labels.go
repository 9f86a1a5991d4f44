package harness

// failedDelivery names the delivery of a clean run whose error ended it,
// for the message that says the job failed there.
func failedDelivery(ex *execution) string {
	for _, d := range ex.deliveries {
		if d.outcome.Err != "" {
			return d.spec.Label()
		}
	}
	return ex.deliveries[0].spec.Label()
}
