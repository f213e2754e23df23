package chaos

import (
	"fmt"
	"sort"
	"strings"

	"github.com/outbox-relay/relay/pkg/outbox"
)

func fmtCounts(c map[outbox.Status]int) string {
	var parts []string
	for s, n := range c {
		parts = append(parts, fmt.Sprintf("%s=%d", s, n))
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, " ") + "}"
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
