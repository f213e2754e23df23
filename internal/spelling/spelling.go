// Package spelling finds what a mistyped name was meant to be: a flag, a
// broker URL option, an environment variable or a URL scheme one or two
// typing mistakes away from one the program knows. Every "did you mean" of
// the binaries comes from here, so that they all forgive the same slips.
package spelling

import (
	"slices"
	"strings"
)

// Distance counts the insertions, deletions, substitutions and swaps of two
// neighbours that turn a into b (optimal string alignment).
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

// Closest returns the candidate that name is most likely a slip of, or "".
// Short names allow one mistake and longer ones two: "nat" is nats, but
// "ab" is not every two-letter name. Case is ignored, so batch_size finds
// BATCH_SIZE (a different environment variable on Linux, and a mistake). A
// candidate of one letter is never offered, being too easy to hit by
// chance; nor is name itself.
func Closest(name string, candidates []string) string {
	lower := strings.ToLower(name)
	limit := 1
	if len([]rune(name)) > 4 {
		limit = 2
	}
	best, bestDist := "", 0
	for _, c := range candidates {
		if len(c) < 2 || c == name {
			continue
		}
		d := Distance(lower, strings.ToLower(c))
		if d <= limit && (best == "" || d < bestDist) {
			best, bestDist = c, d
		}
	}
	return best
}

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

// Slip is an environment variable that is set, is not one the program
// reads, and is close to one it does.
type Slip struct {
	Name, Meant string
}

// EnvSlips returns, sorted by name, the variables of environ (NAME=value
// strings, as os.Environ gives them) that are none of known but a slip of
// one: BACH_SIZE for BATCH_SIZE. A misspelt optional setting is otherwise
// ignored without a word, and the default it leaves in force is found only
// when something goes wrong.
func EnvSlips(environ []string, known []string) []Slip {
	isKnown := make(map[string]bool, len(known))
	for _, k := range known {
		isKnown[k] = true
	}
	var out []Slip
	seen := map[string]bool{}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if name == "" || isKnown[name] || seen[name] {
			continue
		}
		seen[name] = true
		if meant := Closest(name, known); meant != "" {
			out = append(out, Slip{name, meant})
		}
	}
	slices.SortFunc(out, func(a, b Slip) int { return strings.Compare(a.Name, b.Name) })
	return out
}
