// Package suggest finds the name a mistyped one was meant to be, for the
// "did you mean …?" of an error. relay-cli's flags and the broker drivers'
// URL options share it, so a slip is forgiven the same way in both.
package suggest

import "strings"

// Nearest returns the name in names that name is most likely a slip of:
// one typing mistake away (two for names longer than four letters), or
// else the only name it begins. It returns "" when none is that close: a
// guess far off misleads more than none.
func Nearest(name string, names []string) string {
	best, bestDist := "", 0
	limit := 1
	if len(name) > 4 {
		limit = 2
	}
	for _, n := range names {
		d := Distance(name, n)
		if d <= limit && (best == "" || d < bestDist) {
			best, bestDist = n, d
		}
	}
	if best != "" {
		return best
	}
	var prefixed []string
	for _, n := range names {
		if len(name) >= 2 && strings.HasPrefix(n, name) {
			prefixed = append(prefixed, n)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// Distance counts the insertions, deletions, substitutions and swaps of
// two neighbours that turn a into b (optimal string alignment): a swap is
// one slip of the fingers, not two.
func Distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
