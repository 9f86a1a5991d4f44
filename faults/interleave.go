package faults

import "math/rand/v2"

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
	seen := map[string]bool{}
	var out [][]int
	add := func(o []int) {
		if len(out) < max && !seen[string(toBytes(o))] {
			seen[string(toBytes(o))] = true
			out = append(out, o)
		}
	}
	for k := 0; k <= a; k++ {
		add(blockAt(a, b, k, 1, 2))
	}
	for k := 0; k <= b; k++ {
		add(blockAt(b, a, k, 2, 1))
	}
	add(alternate(a, b))
	rng := rand.New(rand.NewPCG(uint64(a), uint64(b)))
	for tries := 0; len(out) < max && tries < 100*max; tries++ {
		add(shuffle(rng, a, b))
	}
	return out
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
