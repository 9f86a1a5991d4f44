package effects

// SetExecuting makes f run while each payment request executes, its key in
// flight, so a test can hold one there and make a concurrent request.
func SetExecuting(l *Log, f func(PaymentRequest)) { l.payments.executing = f }
