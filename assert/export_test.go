package assert

// PlanID identifies the plan s holds, so tests can tell whether a
// snapshot planned anew.
func PlanID(s *Snapshotter) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}
