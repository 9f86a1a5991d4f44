package faults

import (
	"iter"
	"math/rand/v2"
)

// interleavings returns orders in which two deliveries of a and b steps
// can be granted their steps, each order a list of 1s and 2s. While there
// are at most max of them it returns all; beyond, it returns max: first
// the orders where one delivery runs whole between two steps of the other
// (where most races show), then strict alternation, then a sample drawn
// with a fixed seed, so the same arguments always give the same orders.
func interleavings(a, b, max int) [][]int {
	if max < 1 {
		max = 1
	}
	if binomial(a+b, a) <= max {
		var out [][]int
		var walk func(prefix []int, a, b int)
		walk = func(prefix []int, a, b int) {
			if a == 0 && b == 0 {
				out = append(out, append([]int(nil), prefix...))
				return
			}
			if a > 0 {
				walk(append(prefix, 1), a-1, b)
			}
			if b > 0 {
				walk(append(prefix, 2), a, b-1)
			}
		}
		walk(nil, a, b)
		return out
	}
	s := newSampler(a, b, max)
	for o := range s.candidates(100 * max) {
		s.add(o)
	}
	return s.out
}

// sampler gathers up to max distinct orders of two deliveries of a and b
// steps.
type sampler struct {
	a, b, max int
	seen      map[string]bool
	out       [][]int
}

func newSampler(a, b, max int) *sampler {
	return &sampler{a: a, b: b, max: max, seen: map[string]bool{}}
}

func (s *sampler) add(o []int) {
	if len(s.out) < s.max && !s.seen[string(toBytes(o))] {
		s.seen[string(toBytes(o))] = true
		s.out = append(s.out, o)
	}
}

// candidates yields the orders a sample is drawn from, until the sampler
// is full: first those where one delivery runs whole between two steps
// of the other (where most races show), then strict alternation, then up
// to tries orders drawn with a fixed seed, so the same arguments always
// give the same orders.
func (s *sampler) candidates(tries int) iter.Seq[[]int] {
	return func(yield func([]int) bool) {
		a, b := s.a, s.b
		var fixed [][]int
		for k := 0; k <= a; k++ {
			fixed = append(fixed, blockAt(a, b, k, 1, 2))
		}
		for k := 0; k <= b; k++ {
			fixed = append(fixed, blockAt(b, a, k, 2, 1))
		}
		fixed = append(fixed, alternate(a, b))
		for _, o := range fixed {
			if len(s.out) >= s.max || !yield(o) {
				return
			}
		}
		rng := rand.New(rand.NewPCG(uint64(a), uint64(b)))
		for range tries {
			if len(s.out) >= s.max || !yield(shuffle(rng, a, b)) {
				return
			}
		}
	}
}

// blockAt is the order where delivery x does k of its n steps, delivery y
// does all m of its steps, then x finishes.
func blockAt(n, m, k, x, y int) []int {
	o := make([]int, 0, n+m)
	for range k {
		o = append(o, x)
	}
	for range m {
		o = append(o, y)
	}
	for range n - k {
		o = append(o, x)
	}
	return o
}

func alternate(a, b int) []int {
	var o []int
	for a > 0 || b > 0 {
		if a > 0 {
			o, a = append(o, 1), a-1
		}
		if b > 0 {
			o, b = append(o, 2), b-1
		}
	}
	return o
}

func shuffle(rng *rand.Rand, a, b int) []int {
	o := make([]int, 0, a+b)
	for a > 0 || b > 0 {
		if b == 0 || (a > 0 && rng.IntN(a+b) < a) {
			o, a = append(o, 1), a-1
		} else {
			o, b = append(o, 2), b-1
		}
	}
	return o
}

func toBytes(o []int) []byte {
	b := make([]byte, len(o))
	for i, v := range o {
		b[i] = byte(v)
	}
	return b
}

// binomial is n choose k, saturating instead of overflowing.
func binomial(n, k int) int {
	if k < 0 || k > n {
		return 0
	}
	r := 1
	for i := 1; i <= k; i++ {
		r = r * (n - k + i) / i
		if r > 1<<40 {
			return 1 << 40
		}
	}
	return r
}
